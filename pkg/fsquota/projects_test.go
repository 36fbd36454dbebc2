package fsquota_test

import (
	"os"
	"path/filepath"
	"testing"

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
