package core

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/ktest"
)

func TestIsBlank(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		data  func() []byte
		blank bool
	}{
		{"zeros", func() []byte { return make([]byte, 4<<20) }, true},
		{"small zeros", func() []byte { return make([]byte, 4096) }, true},
		{"byte at the end of the first MiB", func() []byte { b := make([]byte, 4<<20); b[blankSpan-1] = 1; return b }, false},
		{"byte after the first MiB", func() []byte { b := make([]byte, 4<<20); b[blankSpan] = 1; return b }, true},
		{"signature at 0", func() []byte { return append([]byte("XFSB"), make([]byte, 4<<20)...) }, false},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.data(), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := IsBlank(p)
		if err != nil || got != c.blank {
			t.Errorf("%s: IsBlank = %v, %v; want %v", c.name, got, err, c.blank)
		}
	}
	if _, err := IsBlank(filepath.Join(dir, "missing")); err == nil {
		t.Error("IsBlank of a missing device succeeded")
	}
}

// loopDisk is a sparse 320 MiB image, prepared by init (may be nil),
// behind a loop device.
func loopDisk(t *testing.T, init func(f *os.File)) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("needs root")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(320 << 20); err != nil {
		t.Fatal(err)
	}
	if init != nil {
		init(f)
	}
	d, err := loop.Create(f, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Detach() })
	return d.Path()
}

// TestFirstBootFormatsOnlyBlankDisks: a blank disk is formatted XFS and
// mounted, and keeps its files on the next mount (no second format); a disk
// with another filesystem or unknown bytes is never formatted, and the error
// says why.
func TestFirstBootFormatsOnlyBlankDisks(t *testing.T) {
	if ktest.InVM() {
		// The kernel-test VM has no mkfs.xfs or mkfs.ext4; the host run
		// (make test-unit, as root) and the node's boot test format disks.
		ktest.SkipExpected(t, "needs mkfs.xfs and mkfs.ext4, which the kernel-test VM lacks; runs on the host")
	}
	// The node finds mkfs.xfs on its PATH (/sbin in the node image); a
	// test runner's PATH may lack the sbin directories (Bazel's has only
	// /bin:/usr/bin), so they are added here, as the node has them.
	t.Setenv("PATH", os.Getenv("PATH")+":/usr/sbin:/sbin")
	log := logtree.New().LeveledFor("test")
	ctx := context.Background()
	target := t.TempDir()
	unmount := func() {
		if err := unix.Unmount(target, 0); err != nil {
			t.Fatal(err)
		}
	}

	dev := loopDisk(t, nil)
	// No prjquota: this host's kernel may lack XFS quotas; the boot
	// test mounts with it in the VM.
	m := &DataMount{Source: dev, FSType: "xfs", FormatIfBlank: true}
	if mounted, err := ensureMounted(ctx, log, m, target); err != nil || !mounted {
		t.Fatalf("first boot: mounted=%v, %v", mounted, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil || st.Type != unix.XFS_SUPER_MAGIC {
		t.Fatalf("not XFS after the first boot (type %#x, %v)", st.Type, err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	unmount()
	if mounted, err := ensureMounted(ctx, log, m, target); err != nil || !mounted {
		t.Fatalf("second boot: mounted=%v, %v", mounted, err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "keep")); err != nil || string(b) != "data" {
		t.Fatalf("second boot lost the file: %q, %v", b, err)
	}
	unmount()

	ext4 := loopDisk(t, nil)
	if out, err := exec.Command("mkfs.ext4", "-q", ext4).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	garbage := loopDisk(t, func(f *os.File) { f.WriteAt([]byte("someone's data"), 512<<10) })
	for _, d := range []string{ext4, garbage} {
		before := head(t, d)
		_, err := ensureMounted(ctx, log, &DataMount{Source: d, FSType: "xfs", Options: "prjquota", FormatIfBlank: true}, target)
		if !errors.Is(err, ErrNotBlank) {
			t.Errorf("%s: err = %v, want ErrNotBlank", d, err)
		}
		if !bytes.Equal(before, head(t, d)) {
			t.Errorf("%s: the device's first MiB changed: it was written to", d)
		}
	}
}

func head(t *testing.T, dev string) []byte {
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, blankSpan)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}
