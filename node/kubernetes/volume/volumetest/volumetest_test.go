package volumetest

import (
	"os"
	"path/filepath"
	"testing"

	"source.plinth.dev/pkg/fsquota"
)

func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	d, qerr := DataDir(t, dir)
	if d.FullPath() != dir || d.Volumes.FullPath() != filepath.Join(dir, "volumes") {
		t.Errorf("data tree placed at %s, volumes at %s", d.FullPath(), d.Volumes.FullPath())
	}
	for _, p := range []string{d.Volumes.FullPath(), d.State.FullPath()} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", p, err)
		}
	}
	if want := fsquota.Probe(d.Volumes.FullPath()); (qerr == nil) != (want == nil) {
		t.Errorf("quota verdict %v, probe says %v", qerr, want)
	}
}
