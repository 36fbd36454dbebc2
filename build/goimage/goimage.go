// Package goimage makes a container image of one Go program: the main
// package built as a static binary, the image's only file and its
// entrypoint. The node image's sandbox image (node/cmd/pause) and the
// tests' workload image (test/images) are made this way; pkg/ociimage
// writes their archives.
package goimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"

	"source.plinth.dev/pkg/ociimage"
)

// Build builds the main package pkg (relative to repoRoot, the directory
// of the main module source.plinth.dev) as a static binary and returns an
// image named ref that holds only it, as its entrypoint, named after the
// package's last element. -trimpath and no symbol table: the same sources
// give the same bytes, so the same image, from any checkout.
func Build(ctx context.Context, repoRoot, pkg, ref string) (ociimage.Image, error) {
	name := path.Base(pkg)
	tmp, err := os.MkdirTemp("", "plinth-image-"+name+"-")
	if err != nil {
		return ociimage.Image{}, fmt.Errorf("building image %s: %w", ref, err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, name)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go" // where the project's machines have it
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = repoRoot
	// Static, so it runs in an image that has nothing else in it.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return ociimage.Image{}, fmt.Errorf("building image %s: go build %s: %w\n%s", ref, pkg, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return ociimage.Image{}, fmt.Errorf("building image %s: %w", ref, err)
	}
	return ociimage.Image{
		Ref:        ref,
		Entrypoint: []string{"/" + name},
		Files:      []ociimage.File{{Path: name, Mode: 0o755, Data: data}},
	}, nil
}
