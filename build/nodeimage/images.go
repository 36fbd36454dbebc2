package nodeimage

import (
	"context"
	"fmt"
	"path/filepath"

	"source.plinth.dev/build/goimage"
	"source.plinth.dev/node/kubernetes/containerd"
)

// NodeImages writes the container images every node has into dir as
// archives and returns their paths: only the sandbox image (node/cmd/pause,
// tagged containerd.SandboxImage), without which containerd runs no pod
// and which a node, pulling nothing, cannot fetch. Images for the pods the
// tests run go into a test variant of the image (Inputs.Images, the
// command's -image). repoRoot is the directory of the main module. The
// image's bytes depend only on its sources, so it does not disturb the
// node image's cache key.
func NodeImages(ctx context.Context, repoRoot, dir string) ([]string, error) {
	pause, err := goimage.Build(ctx, repoRoot, "./node/cmd/pause", containerd.SandboxImage)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "pause.tar")
	if err := pause.WriteFile(p); err != nil {
		return nil, fmt.Errorf("writing %s: %w", p, err)
	}
	return []string{p}, nil
}
