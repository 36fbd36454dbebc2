package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
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

func TestAgnhostLayout(t *testing.T) {
	// Any static binary stands in for agnhost; busybox-static is one.
	const ref = "registry.example/agnhost:9.9"
	img, err := Agnhost(context.Background(), ref, DefaultBusybox, DefaultBusybox)
	if err != nil {
		t.Fatalf("Agnhost: %v (test-unit installs busybox-static)", err)
	}
	var buf bytes.Buffer
	if err := img.WriteArchive(&buf); err != nil {
		t.Fatal(err)
	}
	entries := readArchive(t, buf.Bytes())
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || manifest[0].RepoTags[0] != ref {
		t.Fatalf("manifest = %+v, want one image tagged %s", manifest, ref)
	}
	var config struct {
		Config struct{ Entrypoint, Cmd []string }
	}
	if err := json.Unmarshal(entries[manifest[0].Config], &config); err != nil {
		t.Fatalf("config: %v", err)
	}
	if got := strings.Join(config.Config.Entrypoint, " ") + " " + strings.Join(config.Config.Cmd, " "); got != "/agnhost pause" {
		t.Errorf("entrypoint and command = %q, want %q as upstream", got, "/agnhost pause")
	}
	want, err := os.ReadFile(DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	layerData := entries[manifest[0].Layers[0]]
	tr := tar.NewReader(bytes.NewReader(layerData))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
	}
	layer := readArchive(t, layerData)
	if !bytes.Equal(layer["agnhost"], want) || files["agnhost"].Mode&0o111 == 0 {
		t.Errorf("/agnhost is not the given binary, executable")
	}
	for link, target := range map[string]string{"agnhost-2": "agnhost", "bin/sh": "busybox", "bin/nsenter": "busybox"} {
		if h := files[link]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
			t.Errorf("/%s is not a link to %s: %+v", link, target, h)
		}
	}
	passwd := string(layer["etc/passwd"])
	if !strings.Contains(passwd, "user-defined-in-image:x:1000:") || !strings.HasPrefix(passwd, "root:x:0:0:") {
		t.Errorf("/etc/passwd lacks root or the image's user:\n%s", passwd)
	}
	if !strings.Contains(string(layer["etc/group"]), "group-defined-in-image:x:50000:user-defined-in-image") {
		t.Errorf("/etc/group lacks the image's group:\n%s", layer["etc/group"])
	}
}

func TestAgnhostRejectsDynamic(t *testing.T) {
	if _, err := Agnhost(context.Background(), "x:1", "/bin/ls", DefaultBusybox); err == nil {
		t.Fatal("Agnhost accepted a dynamically linked binary; it could not run in the image")
	}
}
