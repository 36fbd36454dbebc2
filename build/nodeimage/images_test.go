package nodeimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"source.plinth.dev/node/kubernetes/containerd"
)

// The image a node ships carries one container image, the sandbox image
// containerd is configured with; the tests' images are for its test
// variant only.
func TestNodeImagesAreTheSandboxOnly(t *testing.T) {
	if os.Getenv("TEST_SRCDIR") != "" {
		// NodeImages builds node/cmd/pause with the host's go.
		t.Skip("builds a Go program: runs under go test, not Bazel")
	}
	paths, err := NodeImages(context.Background(), repoRoot(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || filepath.Base(paths[0]) != "pause.tar" {
		t.Fatalf("the node's images are %q, want only pause.tar", paths)
	}
	if ref := archiveRef(t, paths[0]); ref != containerd.SandboxImage {
		t.Errorf("pause.tar names %q, want containerd's sandbox image %q", ref, containerd.SandboxImage)
	}
}

// archiveRef reads the reference an OCI layout archive names its image by.
func archiveRef(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no index.json", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			t.Fatalf("%s: index.json: %v", path, err)
		}
		if len(index.Manifests) != 1 {
			t.Fatalf("%s holds %d images, want 1", path, len(index.Manifests))
		}
		return index.Manifests[0].Annotations["io.containerd.image.name"]
	}
}
