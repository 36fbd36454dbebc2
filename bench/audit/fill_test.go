package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"source.plinth.dev/node/core/volume"
)

// TestFillScriptMakesEveryFile runs the fill with this host's busybox (the
// busybox the node's test image packs) on a directory of the test's, and
// checks the count it prints against the files on disk.
func TestFillScriptMakesEveryFile(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command("busybox", "sh", "-c", fillScript(dir, 4*perDir)).CombinedOutput()
	if err != nil {
		t.Fatalf("the fill: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "FILES 4000" {
		t.Errorf("the fill printed %q, want FILES 4000", got)
	}
	dirs, err := filepath.Glob(filepath.Join(dir, "d*"))
	if err != nil || len(dirs) != 4 {
		t.Fatalf("directories %v (%v), want d0..d3", dirs, err)
	}
	for _, d := range dirs {
		if es, err := os.ReadDir(d); err != nil || len(es) != perDir {
			t.Errorf("%s: %d entries (%v), want %d", d, len(es), err, perDir)
		}
	}
	// A fill that cannot create its files fails rather than printing a
	// short count.
	if out, err := exec.Command("busybox", "sh", "-c", fillScript(filepath.Join(dir, "d0", "1"), perDir)).CombinedOutput(); err == nil {
		t.Errorf("a fill into a file succeeded: %s", out)
	}
}

// TestBigClaimHoldsItsFiles checks that the big claim's inode limit holds
// what the fill makes (a 2 GiB claim refused the 1,000,000th file's
// inode, ENOSPC, half-way), and that it is no larger than it needs.
func TestBigClaimHoldsItsFiles(t *testing.T) {
	for _, tc := range []struct {
		files int
		gib   int64
	}{{50000, 2}, {500000, 2}, {1000000, 4}, {2000000, 8}} {
		gib := bigClaimGiB(tc.files)
		if gib != tc.gib {
			t.Errorf("bigClaimGiB(%d) = %d, want %d", tc.files, gib, tc.gib)
		}
		if limit := volume.InodeLimit(gib << 30); limit < uint64(bigEntries(tc.files)) {
			t.Errorf("a claim of %d GiB holds %d inodes, the fill of %d files makes %d entries", gib, limit, tc.files, bigEntries(tc.files))
		}
	}
}
