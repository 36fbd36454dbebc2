// Package volumetest holds what tests of the volume layer, and of the layers
// built on it (the provisioner, the CSI plugin), need to make a
// volume.Manager: a data directory on a real filesystem, probed for project
// quota support the way the node probes it, so a test sees the same
// enforced or unenforced capacity a node on that filesystem would.
//
// It does not import package volume: the volume package's own tests use it,
// and an import of volume here would be a cycle. Callers pass what DataDir
// returns to volume.New.
package volumetest

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
)

// DataDir places a data directory tree at dir, creates it, and probes its
// volumes directory for project quotas (fsquota.Probe). quotaErr is nil
// where quotas are enforced; it is what volume.Config.QuotaError wants.
// Failures to set the tree up end the test.
func DataDir(t testing.TB, dir string) (d *localstorage.DataDirectory, quotaErr error) {
	t.Helper()
	d = new(localstorage.DataDirectory)
	if err := d.Place(dir); err != nil {
		t.Fatal(err)
	}
	if err := d.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	return d, fsquota.Probe(d.Volumes.FullPath())
}

// Tmpfs mounts a tmpfs of size bytes on a fresh directory for the test and
// unmounts it when the test ends. Nobody else writes there, so its free
// space moves only with what the test does: the data directory of tests
// that assert exact space figures. It needs root.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	ktest.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mounting tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// LimitedProjects lists the quota records with limits for project IDs in
// [first, last] on the filesystem holding path: the volume layer's quotas
// (callers pass volume.FirstProjectID and volume.LastProjectID), for tests
// that look for quotas left behind. Records without limits are the
// filesystem's bookkeeping of usage and no one's leak.
func LimitedProjects(path string, first, last uint32) (map[uint32]fsquota.Quota, error) {
	all, err := fsquota.Projects(path)
	if err != nil {
		return nil, fmt.Errorf("listing the quota records of %s: %w", path, err)
	}
	out := map[uint32]fsquota.Quota{}
	for id, q := range all {
		if id >= first && id <= last && q.Limits != (fsquota.Limits{}) {
			out[id] = q
		}
	}
	return out, nil
}
