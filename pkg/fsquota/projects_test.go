package fsquota_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// TestProjectsListsLimitedProjects: Projects finds every project with
// limits, with its limits and usage, and, on XFS, forgets a project once
// its limits are cleared and its files are gone (what a leak check relies
// on to tell a cleared quota from a leaked one).
func TestProjectsListsLimitedProjects(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			a, ida := volume(t, fs.disk, fsquota.Limits{Bytes: 8 * MiB, Inodes: 50})
			b, idb := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB})
			if err := writeFile(filepath.Join(a, "f"), MiB); err != nil {
				t.Fatal(err)
			}
			ps, err := fsquota.Projects(a)
			if err != nil {
				t.Fatal(err)
			}
			if q := ps[ida]; q.ProjectID != ida || q.Limits != (fsquota.Limits{Bytes: 8 * MiB, Inodes: 50}) || q.UsedBytes < MiB || q.UsedInodes < 2 {
				t.Errorf("Projects()[%d] = %+v; want its limits and at least 1 MiB and 2 inodes used", ida, q)
			}
			if q := ps[idb]; q.ProjectID != idb || q.Limits.Bytes != 4*MiB {
				t.Errorf("Projects()[%d] = %+v; want a 4 MiB limit", idb, q)
			}
			if fs.disk != "xfs" {
				// ext4 drops a project's record from its quota file
				// only when the kernel releases the cached entry.
				return
			}
			if err := fsquota.ClearQuota(b); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(b); err != nil {
				t.Fatal(err)
			}
			ps, err = fsquota.Projects(a)
			if err != nil {
				t.Fatal(err)
			}
			if q, ok := ps[idb]; ok {
				t.Errorf("project %d still listed after its limits were cleared and its directory removed: %+v", idb, q)
			}
			if _, ok := ps[ida]; !ok {
				t.Errorf("project %d no longer listed", ida)
			}
		})
	}
}

// TestClearLimitsByID clears the limits of a project that no directory
// carries any more, as after a SetQuota cut short between the limits and
// the ID: Projects must then no longer list it (XFS forgets a project
// without limits or usage), while another project keeps its limits.
func TestClearLimitsByID(t *testing.T) {
	a, ida := volume(t, "xfs", fsquota.Limits{Bytes: 8 * MiB})
	b, idb := volume(t, "xfs", fsquota.Limits{Bytes: 4 * MiB})
	// Remove b without clearing its limits: what a crash leaves, limits
	// that no directory names.
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	// XFS inactivates a removed inode in the background (since Linux
	// 5.19), and until then the project still counts it: a project with
	// usage is listed whatever its limits, which is right, but not what
	// this test is about. Wait until the directory's inode is gone (a
	// syncfs flushes the background work).
	var ps map[uint32]fsquota.Quota
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		syncFS(t, a)
		if ps, err = fsquota.Projects(a); err != nil {
			t.Fatal(err)
		}
		if ps[idb].UsedInodes == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if q, ok := ps[idb]; !ok || q.Limits.Bytes != 4*MiB || q.UsedInodes != 0 {
		t.Fatalf("before: project %d = %+v, %v; want its 4 MiB limit outliving its directory, no inode left", idb, q, ok)
	}
	if err := fsquota.ClearLimits(a, idb); err != nil {
		t.Fatal(err)
	}
	if err := fsquota.ClearLimits(a, idb); err != nil {
		t.Fatalf("clearing again: %v", err)
	}
	ps, err = fsquota.Projects(a)
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := ps[idb]; ok {
		t.Errorf("project %d still listed after ClearLimits: %+v", idb, q)
	}
	if q := ps[ida]; q.Limits.Bytes != 8*MiB {
		t.Errorf("project %d = %+v; its 8 MiB limit must stay", ida, q)
	}
}

// syncFS flushes the filesystem that holds dir.
func syncFS(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatalf("syncfs %s: %v", dir, err)
	}
}
