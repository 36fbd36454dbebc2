package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// readArchive returns the entries of a docker-archive by name.
func readArchive(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading archive: %v", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		out[h.Name] = b
	}
}

func TestArchiveLayout(t *testing.T) {
	img := Image{
		Ref:        "plinth.local/test:1",
		Entrypoint: []string{"/hello"},
		Files: []File{
			{Path: "/hello", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
			{Path: "bin/sh", Link: "busybox"},
		},
	}
	var a, b bytes.Buffer
	if err := img.WriteArchive(&a); err != nil {
		t.Fatal(err)
	}
	if err := img.WriteArchive(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two archives of the same image differ; the build must be deterministic")
	}
	entries := readArchive(t, a.Bytes())
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || manifest[0].RepoTags[0] != img.Ref {
		t.Fatalf("manifest = %+v, want one image tagged %s", manifest, img.Ref)
	}
	if _, ok := entries[manifest[0].Config]; !ok {
		t.Fatalf("config %s missing from archive", manifest[0].Config)
	}
	layer := readArchive(t, entries[manifest[0].Layers[0]])
	if got := string(layer["hello"]); got != "#!/bin/sh\n" {
		t.Errorf("hello = %q", got)
	}
	for _, dir := range []string{"proc/", "tmp/", "dev/"} {
		if _, ok := layer[dir]; !ok {
			t.Errorf("layer lacks %s", dir)
		}
	}
}

func TestInvalidPath(t *testing.T) {
	img := Image{Ref: "x", Files: []File{{Path: "../escape", Data: []byte("x")}}}
	if err := img.WriteArchive(io.Discard); err == nil {
		t.Fatal("want an error for a path outside the image root")
	}
}

func TestCheckStaticRejectsDynamic(t *testing.T) {
	// /bin/ls is dynamically linked on every Debian system.
	if err := checkStatic("/bin/ls"); err == nil {
		t.Fatal("checkStatic(/bin/ls) = nil, want an error for a dynamic binary")
	}
}
