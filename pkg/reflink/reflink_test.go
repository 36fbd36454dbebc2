package reflink_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/reflink"
	"source.plinth.dev/test/volumetest"
)

func TestProbe(t *testing.T) {
	if err := reflink.Probe(volumetest.ReflinkXFS(t)); err != nil {
		t.Errorf("Probe on an XFS with reflink=1: %v", err)
	}
	// tmpfs has no FICLONE.
	if err := reflink.Probe(volumetest.Tmpfs(t, 16<<20)); !errors.Is(err, reflink.ErrUnsupported) {
		t.Errorf("Probe on tmpfs = %v, want ErrUnsupported", err)
	}
	if err := reflink.Probe(filepath.Join(t.TempDir(), "missing")); err == nil || errors.Is(err, reflink.ErrUnsupported) {
		t.Errorf("Probe of a missing directory = %v, want an error that is not ErrUnsupported", err)
	}
}

// TestCloneSharesBlocks: a clone reads as the original, takes no new data
// blocks, and a write to it leaves the original alone.
func TestCloneSharesBlocks(t *testing.T) {
	dir := volumetest.ReflinkXFS(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	syncfs(t, dir)
	before := freeBytes(t, dir)
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := reflink.Clone(out, in); err != nil {
		t.Fatal(err)
	}
	syncfs(t, dir)
	if used := before - freeBytes(t, dir); used > 1<<20 {
		t.Errorf("cloning 64 MiB took %d bytes of free space, want under 1 MiB (shared blocks)", used)
	}
	got, err := os.ReadFile(out.Name())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("clone reads %d bytes (%v), unlike the original", len(got), err)
	}
	if _, err := out.WriteAt([]byte("changed"), 0); err != nil {
		t.Fatal(err)
	}
	if orig, _ := os.ReadFile(src); !bytes.Equal(orig, data) {
		t.Error("writing the clone changed the original")
	}
}

func syncfs(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bfree) * st.Bsize
}

func TestCopyTreeRefusesMountsInside(t *testing.T) {
	dir := volumetest.ReflinkXFS(t)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst, filepath.Join(src, "mnt")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", filepath.Join(src, "mnt"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(src, "mnt"), 0) })
	if _, err := reflink.CopyTree(context.Background(), src, dst, reflink.TreeOptions{}); err == nil {
		t.Error("CopyTree copied a tree with a mount point inside")
	}
}

func setXattr(p, name, val string) error { return unix.Lsetxattr(p, name, []byte(val), 0) }

func getXattr(p, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
