package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "1Mi": 1 << 20, "4Mi": 4 << 20, "8Ki": 8192, "2Gi": 2 << 30, "1Ti": 1 << 40} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1M", "1MB", "-4096", "0", "1000", "1.5Mi", "Mi", "9999999999Ti"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseConfig(t *testing.T) {
	base := []string{"-fs=/a", "-fs-ro=/b", "-block=/dev/x", "-block-ro=/dev/y", "-size=1Mi", "-fsgroup=2000"}
	c, err := parseConfig(append(base, "-quota=not-enforced", "-resize-to=4Mi"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.QuotaEnforced || c.Size != 1<<20 || c.ResizeTo != 4<<20 || c.FSGroup != 2000 || c.SkipBlock != "" || c.ResizeTimeout != 3*time.Minute {
		t.Errorf("config = %+v", c)
	}
	if c, err := parseConfig(append(base, "-quota=enforced"), io.Discard); err != nil || !c.QuotaEnforced || c.ResizeTo != 0 {
		t.Errorf("-quota=enforced: %+v, %v", c, err)
	}
	// Block paths are not needed when block is skipped, with a reason.
	c, err = parseConfig([]string{"-fs=/a", "-fs-ro=/b", "-size=1Mi", "-fsgroup=2000", "-quota=enforced", "-skip-block=gVisor passes no block devices"}, io.Discard)
	if err != nil || c.SkipBlock != "gVisor passes no block devices" {
		t.Errorf("-skip-block: %+v, %v", c, err)
	}

	bad := map[string][]string{
		"no -quota":                {},
		"-quota=yes":               {"-quota=yes"},
		"-skip-block without text": {"-quota=enforced", "-skip-block= "},
		"resize not larger":        {"-quota=enforced", "-resize-to=1Mi"},
		"bad resize size":          {"-quota=enforced", "-resize-to=4M"},
		"zero timeout":             {"-quota=enforced", "-resize-timeout=0s"},
		"extra argument":           {"-quota=enforced", "extra"},
	}
	for name, extra := range bad {
		if _, err := parseConfig(append(append([]string{}, base...), extra...), io.Discard); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	if _, err := parseConfig([]string{"-fs=/a", "-fs-ro=/b", "-size=1Mi", "-quota=enforced"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "-block is required") || !strings.Contains(err.Error(), "-fsgroup") {
		t.Errorf("missing -block and -fsgroup: %v", err)
	}
}

func TestVerdict(t *testing.T) {
	pass := result{Name: "a"}
	skip := result{Name: "b", Skip: "not here"}
	fail := result{Name: "c", Err: errors.New("boom")}
	if got := verdict(markInitPassed, markInitFailed, []result{pass, skip}); got != markInitPassed {
		t.Errorf("pass+skip: %q", got)
	}
	got := verdict(markInitPassed, markInitFailed, []result{pass, fail, skip, {Name: "d", Err: errors.New("bang")}})
	if !strings.HasPrefix(got, markInitFailed+" 2 of 4 checks failed (c, d): first: c: boom") {
		t.Errorf("failures: %q", got)
	}
	if got := verdict(markInitPassed, markInitFailed, nil); !strings.HasPrefix(got, markInitFailed) {
		t.Errorf("no checks: %q", got)
	}
	if got := verdict(markResizePassed, markResizeFailed, []result{skip}); got != markResizePassed+" (all 1 checks skipped)" {
		t.Errorf("all skipped: %q", got)
	}
	for r, want := range map[result]string{pass: "[PASS] a", skip: "[SKIP] b: not here", fail: "[FAIL] c: boom"} {
		if r.String() != want {
			t.Errorf("%+v prints %q, want %q", r, r.String(), want)
		}
	}
}

func TestRules(t *testing.T) {
	if sizeMatches("x", 1<<20, 1<<20) != nil || sizeMatches("x", 1<<20+4096, 1<<20) == nil || sizeMatches("x", 1<<20-4096, 1<<20) == nil {
		t.Error("sizeMatches must accept exactly the request and nothing else")
	}
	st := unix.Statfs_t{Blocks: 256, Bsize: 4096, Frsize: 4096}
	if statfsSize(&st) != 1<<20 {
		t.Errorf("statfsSize = %d", statfsSize(&st))
	}

	const nosuidNodev = unix.ST_NOSUID | unix.ST_NODEV
	if mountFlagsOK(nosuidNodev|unix.ST_RELATIME) != nil {
		t.Error("mountFlagsOK rejects nosuid,nodev,rw")
	}
	for _, f := range []int64{unix.ST_NODEV, unix.ST_NOSUID, nosuidNodev | unix.ST_RDONLY, 0} {
		if mountFlagsOK(f) == nil {
			t.Errorf("mountFlagsOK(%#x) = nil, want an error", f)
		}
	}
	if readOnlyFlagOK(unix.ST_RDONLY) != nil || readOnlyFlagOK(nosuidNodev) == nil {
		t.Error("readOnlyFlagOK must require ST_RDONLY")
	}
	if got := (result{Name: "x", Err: errors.Join(errors.New("a"), errors.New("b"))}).String(); got != "[FAIL] x: a; b" {
		t.Errorf("a multi-line error prints %q, want one line", got)
	}

	wrapped := func(e error) error { return fmt.Errorf("write /dev/x: %w", e) }
	if refusedReadOnly("w", wrapped(unix.EROFS)) != nil || refusedReadOnly("w", wrapped(unix.EPERM)) != nil {
		t.Error("refusedReadOnly rejects EROFS/EPERM")
	}
	if refusedReadOnly("w", nil) == nil || refusedReadOnly("w", wrapped(unix.EACCES)) == nil || refusedReadOnly("w", wrapped(unix.EIO)) == nil {
		t.Error("refusedReadOnly accepts a success or another error")
	}

	if fillOK(1<<20, 1<<20, wrapped(unix.ENOSPC)) != nil || fillOK(1<<20, 1<<20, wrapped(unix.EDQUOT)) != nil {
		t.Error("fillOK rejects a fill that stops at the limit")
	}
	for name, c := range map[string]struct {
		written int64
		err     error
	}{
		"no error":    {2<<20 + 4096, nil},
		"early":       {1<<20 - 4096, unix.ENOSPC},
		"late":        {1<<20 + 4096, unix.EDQUOT},
		"other error": {1 << 20, unix.EIO},
	} {
		if fillOK(1<<20, c.written, c.err) == nil {
			t.Errorf("fillOK %s: want an error", name)
		}
	}

	a, b := pattern(1, 0, 2*blockSize), pattern(1, blockSize, blockSize)
	if !bytes.Equal(a[blockSize:], b) {
		t.Error("pattern depends on where it starts, not only on the offset")
	}
	if bytes.Equal(a[:blockSize], b) || bytes.Equal(pattern(2, 0, blockSize), a[:blockSize]) {
		t.Error("pattern repeats across blocks or seeds")
	}
}

// TestFillOnTmpfs runs the fill check on a real filesystem of 1 MiB: the
// host cluster cannot enforce quotas, so this is where the rule meets a
// kernel that returns ENOSPC at a known limit, and a wrong limit fails it.
func TestFillOnTmpfs(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test mounts a tmpfs")
		}
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	if err := writeReadBack(dir+"/probe", 3*blockSize); err != nil {
		t.Fatal(err)
	}
	if err := fill(dir); err != nil {
		t.Fatalf("fill on a 1 MiB tmpfs: %v", err)
	}
	if _, err := os.Stat(dir + "/fill"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fill left its file behind: %v", err)
	}
	if got, err := fsSize(dir); err != nil || got != 1<<20 {
		t.Errorf("fsSize = %d, %v; want 1 MiB", got, err)
	}
	if err := statfsFlags(dir, mountFlagsOK); err != nil {
		t.Error(err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		t.Fatal(err)
	}
	if err := readOnlyCreate(dir); err != nil {
		t.Error(err)
	}
	if err := statfsFlags(dir, readOnlyFlagOK); err != nil {
		t.Error(err)
	}
}
