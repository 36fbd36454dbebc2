package containerd

import (
	"archive/tar"
	"bytes"
	"path/filepath"
	"reflect"
	"testing"

	"source.plinth.dev/pkg/ociimage"
)

// ArchiveImages reads the name containerd gives an archive the project
// builds (pkg/ociimage, which build/nodeimage's pause image and the test
// images are written with): the node keeps that name present.
func TestArchiveImagesOfABuiltArchive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pause.tar")
	img := ociimage.Image{
		Ref:        SandboxImage,
		Entrypoint: []string{"/pause"},
		Files:      []ociimage.File{{Path: "pause", Mode: 0o755, Data: []byte("#!/bin/true\n")}},
	}
	if err := img.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	got, err := ArchiveImages(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{SandboxImage}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ArchiveImages of the built pause archive = %q, want %q", got, want)
	}
}

// A docker-archive's tags are named as containerd names them; an OCI
// layout's bare tag is no name containerd keeps; a file that is no tar
// is an error, not an empty list.
func TestArchiveImagesFormats(t *testing.T) {
	tarball := func(name, content string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		want    []string
	}{
		{"docker-archive", tarball("manifest.json", `[{"RepoTags":["busybox:1.36","registry.k8s.io/e2e-test-images/agnhost:2.53","localhost:5000/x","me/tool"]}]`),
			[]string{"docker.io/library/busybox:1.36", "docker.io/me/tool:latest", "localhost:5000/x:latest", "registry.k8s.io/e2e-test-images/agnhost:2.53"}},
		{"OCI layout, containerd's name", tarball("index.json", `{"manifests":[{"annotations":{"io.containerd.image.name":"plinth.local/a:1","org.opencontainers.image.ref.name":"1"}}]}`),
			[]string{"plinth.local/a:1"}},
		{"OCI layout, bare tag", tarball("index.json", `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"1"}}]}`), nil},
		{"OCI layout, full ref.name", tarball("./index.json", `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"plinth.local/b:2"}}]}`),
			[]string{"plinth.local/b:2"}},
	} {
		got, err := archiveImages(bytes.NewReader(tc.archive))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: names %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := archiveImages(bytes.NewReader(tarball("index.json", "{not json"))); err == nil {
		t.Error("a broken index.json gave no error")
	}
	if _, err := archiveImages(bytes.NewReader([]byte("not a tar archive, long enough to be read as a header block......"))); err == nil {
		t.Error("a file that is no tar archive gave no error")
	}
}
