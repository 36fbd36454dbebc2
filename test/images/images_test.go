package images

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// readLayer returns the image's layer: each entry's header and content.
func readLayer(t *testing.T, img Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	data, err := img.Layer()
	if err != nil {
		t.Fatal(err)
	}
	headers, contents := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return headers, contents
		}
		if err != nil {
			t.Fatalf("reading layer: %v", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		headers[h.Name], contents[h.Name] = h, b
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
	if img.Ref != ref {
		t.Errorf("image is named %s, want %s", img.Ref, ref)
	}
	if got := strings.Join(img.Entrypoint, " ") + " " + strings.Join(img.Cmd, " "); got != "/agnhost pause" {
		t.Errorf("entrypoint and command = %q, want %q as upstream", got, "/agnhost pause")
	}
	want, err := os.ReadFile(DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	files, layer := readLayer(t, img)
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

func TestFioCarriesItsLibraries(t *testing.T) {
	img, err := Fio(context.Background(), DefaultFio)
	if err != nil {
		t.Fatalf("Fio: %v (test-unit installs fio)", err)
	}
	files, _ := readLayer(t, img)
	libs, err := sharedLibraries(context.Background(), DefaultFio)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"usr/bin/fio", "lib64/ld-linux-x86-64.so.2"}, libs...) {
		want = strings.TrimPrefix(want, "/")
		if h := files[want]; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Errorf("the image has no executable regular file /%s: %+v", want, h)
		}
	}
	if len(libs) < 3 {
		t.Errorf("ldd listed %d libraries of Debian's fio (%v), want its libaio, libc and loader at least", len(libs), libs)
	}
}

func TestFioRejectsStatic(t *testing.T) {
	// busybox-static has no libraries for the image to carry.
	if _, err := Fio(context.Background(), DefaultBusybox); err == nil {
		t.Fatal("Fio accepted a static binary, whose ldd lists no libraries")
	}
}
