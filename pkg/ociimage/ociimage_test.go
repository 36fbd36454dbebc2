package ociimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// extract unpacks an archive into a new directory, as an importer sees it.
func extract(t *testing.T, archive []byte) string {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatalf("reading archive: %v", err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestArchive reads the archive back as an OCI layout with
// go-containerregistry's reader: the index names the image for containerd,
// the configuration carries the entrypoint, the layer holds the files, and
// two writes of one image are byte for byte the same.
func TestArchive(t *testing.T) {
	img := Image{
		Ref:        "plinth.local/test:1",
		Entrypoint: []string{"/hello"},
		Files: []File{
			{Path: "/hello", Mode: 0o755, Data: []byte("hello")},
			{Path: "bin/sh", Link: "busybox"},
		},
	}
	var a, b bytes.Buffer
	d1, err := img.WriteArchive(&a)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := img.WriteArchive(&b)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two archives of the same image differ; the build must be deterministic")
	}

	idx, err := layout.ImageIndexFromPath(extract(t, a.Bytes()))
	if err != nil {
		t.Fatalf("not an OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != d1 {
		t.Fatalf("index lists %+v, want the one manifest %s", im.Manifests, d1)
	}
	if got := im.Manifests[0].Annotations[containerdNameAnnotation]; got != img.Ref {
		t.Fatalf("containerd name annotation = %q, want %q", got, img.Ref)
	}
	oci, err := idx.Image(d1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := oci.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/hello" || cf.OS != "linux" {
		t.Fatalf("config = %+v, want entrypoint /hello on linux", cf.Config)
	}
	layers, err := oci.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	found := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading layer: %v", err)
		}
		found[h.Name] = h
	}
	if h := found["hello"]; h == nil || h.Mode != 0o755 || h.Size != 5 {
		t.Fatalf("layer entry hello = %+v, want a 5-byte executable", h)
	}
	if h := found["bin/sh"]; h == nil || h.Linkname != "busybox" {
		t.Fatalf("layer entry bin/sh = %+v, want a link to busybox", h)
	}
	if found["proc/"] == nil {
		t.Fatal("layer has no proc/ mount point")
	}
}

func TestInvalidPath(t *testing.T) {
	img := Image{Ref: "x:1", Files: []File{{Path: "../etc/passwd", Data: []byte("x")}}}
	if _, err := img.WriteArchive(io.Discard); err == nil {
		t.Fatal("a path outside the image root was accepted")
	}
}
