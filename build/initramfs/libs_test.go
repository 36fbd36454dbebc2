package initramfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// The fixtures are the host's own /bin/ls and its libraries: a program
// with an interpreter, a library that needs another (libselinux needs
// libpcre2-8) and sonames that are symlinks to versioned files.
const fixtureProgram = "/bin/ls"

// lddNames returns the sonames ld.so itself loads for prog (from ldd, the
// host loader in trace mode), the test's independent answer.
func lddNames(t *testing.T, prog string) []string {
	t.Helper()
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", prog, err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == "linux-vdso.so.1" {
			continue
		}
		names = append(names, path.Base(f[0]))
	}
	return names
}

func TestLibrariesMatchTheLoader(t *testing.T) {
	entries, err := LibSearch{}.Libraries([]string{fixtureProgram})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]LibEntry{}
	for _, e := range entries {
		have[e.Path] = e
	}
	names := lddNames(t, fixtureProgram)
	if len(names) < 3 {
		t.Fatalf("ldd lists %v for %s; the fixture needs a program with several libraries", names, fixtureProgram)
	}
	for _, n := range names {
		found := false
		for p := range have {
			if path.Base(p) == n {
				found = true
			}
		}
		if !found {
			t.Errorf("the loader loads %s for %s, Libraries did not return it (got %v)", n, fixtureProgram, entries)
		}
	}
	// Every symlink's target is in the result too, and files are
	// regular files on the host.
	for _, e := range entries {
		if e.Link == "" {
			if fi, err := os.Lstat(e.Source); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s: source %s is not a regular file (%v)", e.Path, e.Source, err)
			}
			continue
		}
		target := e.Link
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(e.Path), target)
		}
		if _, ok := have[target]; !ok {
			t.Errorf("symlink %s -> %s: target missing from the result", e.Path, e.Link)
		}
	}
	if !sortedByPath(entries) {
		t.Error("result not sorted by path")
	}
}

func sortedByPath(es []LibEntry) bool {
	for i := 1; i < len(es); i++ {
		if es[i-1].Path >= es[i].Path {
			return false
		}
	}
	return true
}

// materialize copies the program and the entries into a new root.
func materialize(t *testing.T, prog string, entries []LibEntry) string {
	t.Helper()
	root := t.TempDir()
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(prog, filepath.Join(root, prog))
	for _, e := range entries {
		dst := filepath.Join(root, e.Path)
		if e.Link == "" {
			copyFile(e.Source, dst)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(e.Link, dst); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestLibrariesAreEnough runs the program in a root holding only it and
// what Libraries returned: the closure is complete when it runs there.
func TestLibrariesAreEnough(t *testing.T) {
	entries, err := LibSearch{}.Libraries([]string{fixtureProgram})
	if err != nil {
		t.Fatal(err)
	}
	root := materialize(t, fixtureProgram, entries)

	// Resolving inside the fixture root gives the same answer.
	again, err := LibSearch{Root: root}.Libraries([]string{fixtureProgram})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(entries) {
		t.Fatalf("in the fixture root: %v, on the host: %v", again, entries)
	}
	for i := range again {
		if again[i].Path != entries[i].Path || again[i].Link != entries[i].Link {
			t.Errorf("entry %d in the fixture root: %+v, on the host: %+v", i, again[i], entries[i])
		}
	}

	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("running the fixture needs root (chroot), and CI=true forbids skipping")
		}
		t.Skip("running the fixture needs root (chroot)")
	}
	cmd := exec.Command(fixtureProgram, "/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a root with only its libraries: %v\n%s", fixtureProgram, err, out)
	}
	if !strings.Contains(string(out), "bin") {
		t.Errorf("ls / in the fixture root printed %q, want it to list bin", out)
	}
}

func TestMissingLibraryIsAClearError(t *testing.T) {
	entries, err := LibSearch{}.Libraries([]string{fixtureProgram})
	if err != nil {
		t.Fatal(err)
	}
	root := materialize(t, fixtureProgram, entries)
	// Drop the file behind a library that only another library needs,
	// leaving its soname symlink dangling.
	const soname, needer = "libpcre2-8.so.0", "libselinux.so.1"
	var lib string
	for _, e := range entries {
		if strings.HasPrefix(path.Base(e.Path), "libpcre2-8.so") && e.Link == "" {
			lib = e.Path
		}
	}
	if lib == "" {
		t.Fatalf("no libpcre2-8 in %v; the fixture expects /bin/ls to need libselinux, which needs it", entries)
	}
	if err := os.Remove(filepath.Join(root, lib)); err != nil {
		t.Fatal(err)
	}
	_, err = LibSearch{Root: root}.Libraries([]string{fixtureProgram})
	if err == nil {
		t.Fatal("no error with a library missing")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v does not wrap fs.ErrNotExist", err)
	}
	for _, want := range []string{soname, needer, "not found in", "/lib/x86_64-linux-gnu"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStaticProgramNeedsNothing(t *testing.T) {
	const static = "/bin/busybox" // Debian's busybox-static
	o, err := (&resolver{}).read(static)
	if err != nil {
		t.Fatalf("the test needs busybox-static: %v", err)
	}
	if o.interp != "" || len(o.needed) != 0 {
		t.Fatalf("%s is dynamically linked (%q, %q); install busybox-static", static, o.interp, o.needed)
	}
	got, err := LibSearch{}.Libraries([]string{static})
	if err != nil || len(got) != 0 {
		t.Errorf("Libraries(static) = %v, %v; want nothing", got, err)
	}
}

func TestExpandPath(t *testing.T) {
	got := expandPath("$ORIGIN/../lib:${ORIGIN}/x::/opt/$LIB:/p/$PLATFORM", "/usr/bin")
	want := []string{"/usr/lib", "/usr/bin/x", "/opt/lib/x86_64-linux-gnu", "/p/x86_64"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("expandPath = %q, want %q", got, want)
	}
}

func TestSearchDirs(t *testing.T) {
	defaults := []string{"/lib"}
	prog := &object{rpath: []string{"/prog-rpath"}}
	withRunpath := &object{runpath: []string{"/runpath"}, rpath: []string{"/ignored-rpath"}}
	lib := &object{rpath: []string{"/lib-rpath"}}
	for _, c := range []struct {
		name    string
		obj     *object
		loaders []*object
		want    []string
	}{
		{"program's own rpath", prog, nil, []string{"/prog-rpath", "/lib"}},
		// DT_RPATH of the loaders applies to what their libraries need.
		{"rpath inherited", lib, []*object{prog}, []string{"/lib-rpath", "/prog-rpath", "/lib"}},
		// DT_RUNPATH replaces DT_RPATH and applies to direct needs only.
		{"runpath wins", withRunpath, []*object{prog}, []string{"/runpath", "/lib"}},
		{"runpath not inherited", lib, []*object{withRunpath}, []string{"/lib-rpath", "/lib"}},
		{"nothing", &object{}, nil, []string{"/lib"}},
	} {
		if got := searchDirs(c.obj, c.loaders, defaults); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: searchDirs = %q, want %q", c.name, got, c.want)
		}
	}
}
