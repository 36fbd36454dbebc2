package nodeimage

import (
	"context"
	"fmt"
	"path/filepath"

	"source.plinth.dev/test/images"
)

// TestImages writes the container images every node has, pause (the
// sandbox image), busybox and the e2e test workload (so the same workload
// runs on a VM node as on the host), as docker-archive tarballs into dir and
// returns their paths. Their bytes depend only on their sources, so they
// do not disturb the image's cache key.
func TestImages(ctx context.Context, repoRoot, dir string) ([]string, error) {
	pause, err := images.Pause(ctx, repoRoot)
	if err != nil {
		return nil, err
	}
	busybox, err := images.Busybox(ctx, images.DefaultBusybox)
	if err != nil {
		return nil, err
	}
	workload, err := images.PersistentVolume(ctx, repoRoot)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, img := range []struct {
		name string
		img  images.Image
	}{{"pause.tar", pause}, {"busybox.tar", busybox}, {"persistentvolume.tar", workload}} {
		p := filepath.Join(dir, img.name)
		if err := img.img.WriteFile(p); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
