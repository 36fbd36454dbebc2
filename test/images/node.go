package images

import (
	"context"
	"fmt"
	"path/filepath"
)

// WriteNodeTestImages writes, as archives into dir, the images the tests
// run on a node booted from the node image beyond the node's own sandbox
// image: busybox (the tests' pods and the example pod `make run-vm`
// prints) and the e2e workload (the same workload as on the host). It
// returns their paths. The node image's test variant carries them
// (build/scripts/nodeimage-test.sh, through cmd/testimages); the shipped
// image does not. Their bytes depend only on their sources, so they do
// not disturb the node image's cache key.
func WriteNodeTestImages(ctx context.Context, repoRoot, dir string) ([]string, error) {
	busybox, err := Busybox(ctx, DefaultBusybox)
	if err != nil {
		return nil, err
	}
	workload, err := PersistentVolume(ctx, repoRoot)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, img := range []struct {
		name string
		img  Image
	}{{"busybox.tar", busybox}, {"persistentvolume.tar", workload}} {
		p := filepath.Join(dir, img.name)
		if err := img.img.WriteFile(p); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
