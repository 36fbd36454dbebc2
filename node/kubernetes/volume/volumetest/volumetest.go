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
	"testing"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
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
