package nodeimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"source.plinth.dev/build/initramfs"
)

// staticInit returns a static program to stand in for plinth-node:
// Debian's busybox-static (the test binary itself links libc through
// the packages it imports).
func staticInit(t *testing.T) string {
	t.Helper()
	const p = "/bin/busybox"
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("the tests need busybox-static: %v", err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; install busybox-static", p)
		}
	}
	return p
}

// smallInputs is an image with one dynamic program (/bin/ls, with its
// libraries), busybox's links and one container image.
func smallInputs(t *testing.T, compression string) Inputs {
	t.Helper()
	dir := t.TempDir()
	tar := filepath.Join(dir, "app.tar")
	if err := os.WriteFile(tar, []byte("not really a tar, bytes are bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Inputs{
		Init:        staticInit(t),
		Programs:    []Program{{Path: "/usr/bin/ls", Host: "/bin/ls"}, {Path: BusyboxPath, Host: "/bin/busybox"}},
		Images:      []string{tar},
		Compression: compression,
		Builder:     "test",
	}
}

func read(t *testing.T, img Image) map[string]initramfs.Entry {
	t.Helper()
	b, err := os.ReadFile(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(img.Path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	if int64(len(b)) != img.RawSize {
		t.Errorf("archive has %d bytes, Image.RawSize says %d", len(b), img.RawSize)
	}
	es, err := initramfs.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]initramfs.Entry{}
	for _, e := range es {
		if _, dup := m[e.Name]; dup {
			t.Errorf("%s twice in the archive", e.Name)
		}
		m[e.Name] = e
	}
	return m
}

func TestLayout(t *testing.T) {
	in := smallInputs(t, "none")
	img, err := Build(context.Background(), in, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := read(t, img)
	initBin, _ := os.ReadFile(in.Init)
	file := func(name string, perm uint32) []byte {
		t.Helper()
		e, ok := m[name]
		if !ok {
			t.Errorf("%s missing", name)
			return nil
		}
		if e.Mode != initramfs.TypeFile|perm {
			t.Errorf("%s: mode %o, want file %o", name, e.Mode, perm)
		}
		return e.Data
	}
	if !bytes.Equal(file("init", 0o755), initBin) {
		t.Error("/init is not the init program")
	}
	file("usr/bin/ls", 0o755)
	file("bin/busybox", 0o755)
	for _, l := range BusyboxLinks {
		if e := m[strings.TrimPrefix(l, "/")]; e.Mode != initramfs.TypeLink|0o777 || string(e.Data) != "busybox" {
			t.Errorf("%s = %+v, want a symlink to busybox", l, e)
		}
	}
	// The loader at the path PT_INTERP names, and libc where it looks.
	if e, ok := m["lib64/ld-linux-x86-64.so.2"]; !ok || e.Mode&initramfs.TypeMask == initramfs.TypeDir {
		t.Errorf("no loader at /lib64/ld-linux-x86-64.so.2: %+v", e)
	}
	file("lib/x86_64-linux-gnu/libc.so.6", 0o755)
	if got := string(file("usr/share/plinth/images/app.tar", 0o644)); got != "not really a tar, bytes are bytes" {
		t.Errorf("image tarball content %q", got)
	}
	if got := string(file("etc/resolv.conf", 0o644)); got != "nameserver 10.0.2.3\n" {
		t.Errorf("resolv.conf = %q", got)
	}
	for _, f := range []string{"etc/passwd", "etc/group", "etc/hosts"} {
		if !bytes.Contains(file(f, 0o644), []byte("root")) && f != "etc/hosts" {
			t.Errorf("%s has no root", f)
		}
	}
	if e := m["dev/console"]; e.Mode != initramfs.TypeChar|0o600 {
		t.Errorf("dev/console = %+v", e)
	}
	if _, ok := m["etc/plinth/modules.list"]; ok {
		t.Error("a module list without modules")
	}
	man, err := os.ReadFile(filepath.Join(img.Dir, Manifest))
	if err != nil || !bytes.Contains(man, []byte("f /usr/bin/ls 755")) {
		t.Errorf("manifest lacks /usr/bin/ls (%v):\n%s", err, man)
	}
}

func TestBuildIsDeterministicAndCached(t *testing.T) {
	ctx := context.Background()
	in := smallInputs(t, "gzip")
	a, err := Build(ctx, in, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	b, err := Build(ctx, in, cache)
	if err != nil {
		t.Fatal(err)
	}
	if a.Cached || b.Cached {
		t.Error("a first build in an empty cache reported a cache hit")
	}
	if a.Key != b.Key {
		t.Errorf("same inputs, keys %s and %s", a.Key, b.Key)
	}
	ab, _ := os.ReadFile(a.Path)
	bb, _ := os.ReadFile(b.Path)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Errorf("same inputs, different bytes (%d and %d)", len(ab), len(bb))
	}
	before, err := os.Stat(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(ctx, in, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cached || c.Path != b.Path {
		t.Errorf("rebuild with the same inputs: %+v, want the cached %s", c, b.Path)
	}
	after, err := os.Stat(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("a cache hit rewrote the archive")
	}
}

func TestKeyFollowsContents(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	in := smallInputs(t, "none")
	base, err := Build(ctx, in, cache)
	if err != nil {
		t.Fatal(err)
	}
	// The same content at another host path: the same image.
	moved := filepath.Join(t.TempDir(), "app.tar")
	data, _ := os.ReadFile(in.Images[0])
	if err := os.WriteFile(moved, data, 0o644); err != nil {
		t.Fatal(err)
	}
	in.Images = []string{moved}
	if img, err := Build(ctx, in, cache); err != nil || img.Key != base.Key || !img.Cached {
		t.Errorf("same contents elsewhere: %+v, %v; want the cached key %s", img, err, base.Key)
	}
	// One byte changed: a new image.
	if err := os.WriteFile(moved, append(data, '!'), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err := Build(ctx, in, cache)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Key == base.Key || changed.Cached {
		t.Errorf("changed image tarball: key %s cached %v, want a new build", changed.Key, changed.Cached)
	}
	// Another builder: a new image.
	in.Builder = "another"
	if img, err := Build(ctx, in, cache); err != nil || img.Key == changed.Key {
		t.Errorf("another builder reused key %s (%v)", img.Key, err)
	}
}

func TestPruneKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	in := smallInputs(t, "none")
	var keys []string
	for i := range keep + 2 {
		in.Builder = "b" + string(rune('0'+i))
		img, err := Build(ctx, in, cache)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, img.Key)
	}
	ents, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != keep {
		t.Errorf("%d images in the cache, want %d", len(ents), keep)
	}
	if _, err := os.Stat(filepath.Join(cache, keys[len(keys)-1])); err != nil {
		t.Errorf("the newest image was pruned: %v", err)
	}
}

func TestDynamicInitIsRefused(t *testing.T) {
	in := smallInputs(t, "none")
	in.Init = "/bin/ls"
	_, err := Build(context.Background(), in, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("Build with a dynamic init: %v, want an error saying to build it static", err)
	}
}

func TestBadInputsAreErrors(t *testing.T) {
	ctx := context.Background()
	in := smallInputs(t, "zstd")
	if _, err := Build(ctx, in, t.TempDir()); err == nil || !strings.Contains(err.Error(), "compression") {
		t.Errorf("unknown compression: %v", err)
	}
	in = smallInputs(t, "none")
	in.Images = append(in.Images, in.Images[0])
	if _, err := Build(ctx, in, t.TempDir()); err == nil || !strings.Contains(err.Error(), "same name") {
		t.Errorf("two images of one name: %v", err)
	}
	in = smallInputs(t, "none")
	in.Programs = append(in.Programs, Program{Path: "/usr/bin/nothing", Host: "/no/such/program"})
	if _, err := Build(ctx, in, t.TempDir()); err == nil || !strings.Contains(err.Error(), "/usr/bin/nothing") {
		t.Errorf("missing program: %v", err)
	}
}
