package localstorage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func placedRoot(t *testing.T) (*Root, string) {
	t.Helper()
	dir := t.TempDir()
	var r Root
	if err := r.Place(dir); err != nil {
		t.Fatalf("Place: %v", err)
	}
	return &r, dir
}

func TestPlacementPaths(t *testing.T) {
	r, dir := placedRoot(t)
	pd, err := r.Kubelet.Plugins.Driver("storage.plinth.dev")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := r.Kubelet.PluginsRegistry.Registration("storage.plinth.dev")
	if err != nil {
		t.Fatal(err)
	}
	fsv, err := r.Data.Volumes.Filesystem("pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	bv, err := r.Data.Volumes.Block("pvc-2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{r.FullPath(), dir},
		{r.Data.FullPath(), dir + "/data"},
		{r.Data.Volumes.FullPath(), dir + "/data/volumes"},
		{r.Data.State.Projects.FullPath(), dir + "/data/state/projects"},
		{r.Data.State.Operations.FullPath(), dir + "/data/state/operations"},
		{r.Ephemeral.CSI.Publications.FullPath(), dir + "/ephemeral/csi/publications"},
		{r.Ephemeral.Lock.FullPath(), dir + "/ephemeral/plinth-node.lock"},
		{r.Ephemeral.PID.FullPath(), dir + "/ephemeral/plinth-node.pid"},
		{r.Kubelet.Pods.FullPath(), dir + "/kubelet/pods"},
		{pd.FullPath(), dir + "/kubelet/plugins/storage.plinth.dev"},
		{pd.CSISocket.FullPath(), dir + "/kubelet/plugins/storage.plinth.dev/csi.sock"},
		{reg.FullPath(), dir + "/kubelet/plugins_registry/storage.plinth.dev-reg.sock"},
		{fsv.FullPath(), dir + "/data/volumes/pvc-1"},
		{bv.FullPath(), dir + "/data/volumes/pvc-2.img"},
	} {
		if c.got != c.want {
			t.Errorf("path %q, want %q", c.got, c.want)
		}
	}
	if fsv.ID() != "pvc-1" || bv.ID() != "pvc-2" {
		t.Errorf("IDs %q, %q", fsv.ID(), bv.ID())
	}
}

func TestSubtreesPlaceIndependently(t *testing.T) {
	var r Root
	if err := r.Place("/root-a"); err != nil {
		t.Fatal(err)
	}
	// The node's --kubelet-dir re-places one subtree, leaving the rest.
	if err := r.Kubelet.Place("/var/lib/kubelet/"); err != nil {
		t.Fatal(err)
	}
	if got := r.Kubelet.PluginsRegistry.FullPath(); got != "/var/lib/kubelet/plugins_registry" {
		t.Errorf("kubelet re-placed: %q", got)
	}
	if got := r.Data.Volumes.FullPath(); got != "/root-a/data/volumes" {
		t.Errorf("data moved with kubelet: %q", got)
	}
	// csi-serve places a data directory on its own.
	var d DataDirectory
	if err := d.Place("/srv/data"); err != nil {
		t.Fatal(err)
	}
	if got := d.State.Projects.FullPath(); got != "/srv/data/state/projects" {
		t.Errorf("standalone data: %q", got)
	}
}

func TestPlaceRefusesRelativePaths(t *testing.T) {
	var r Root
	for _, p := range []string{"", "relative", "./x"} {
		if err := r.Place(p); err == nil {
			t.Errorf("Place(%q) succeeded", p)
		}
	}
}

func TestUnplacedPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("FullPath of an unplaced directory did not panic")
		}
	}()
	var r Root
	_ = r.Data.Volumes.FullPath()
}

func TestSocketPathTooLong(t *testing.T) {
	var k KubeletDirectory
	long := "/" + strings.Repeat("k", 100)
	err := k.Place(long)
	if err != nil {
		t.Fatalf("placing the kubelet tree (no declared sockets) failed: %v", err)
	}
	if _, err := k.Plugins.Driver("storage.plinth.dev"); err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Errorf("overlong socket path: err = %v, want a unix socket length error", err)
	}
	if _, err := k.PluginsRegistry.Registration("storage.plinth.dev"); err == nil {
		t.Error("overlong registration socket path accepted")
	}
}

// Broken declarations are programming errors; Place must name them.
type badNoTag struct {
	Directory
	Sub Directory
}
type badWrongTag struct {
	Directory
	F File `dir:"f"`
}
type badMode struct {
	Directory
	Sub Directory `dir:"sub" mode:"1777"`
}
type badName struct {
	Directory
	Sub Directory `dir:"../escape"`
}
type badType struct {
	Directory
	N int `dir:"n"`
}
type badNoEmbed struct {
	Sub Directory `dir:"sub"`
}

func (b *badNoEmbed) directory() *Directory { return &b.Sub }

func TestBrokenDeclarations(t *testing.T) {
	for _, c := range []struct {
		name string
		n    Node
		want string
	}{
		{"missing tag", &badNoTag{}, `missing dir:"name" tag`},
		{"wrong tag kind", &badWrongTag{}, `has a "dir" tag`},
		{"mode out of range", &badMode{}, "not an octal permission"},
		{"escaping name", &badName{}, `contains "/"`},
		{"not a node type", &badType{}, "is not a Directory, File or Socket"},
		{"no embedded Directory", &badNoEmbed{}, "does not embed"},
	} {
		err := Place(c.n, "/x")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestMkdirAllCreatesDeclaredModes(t *testing.T) {
	// A restrictive umask must not change the declared modes, and a
	// permissive one must not widen them.
	for _, umask := range []int{0o077, 0o000} {
		old := syscall.Umask(umask)
		r, dir := placedRoot(t)
		err := r.MkdirAll()
		syscall.Umask(old)
		if err != nil {
			t.Fatalf("umask %#o: MkdirAll: %v", umask, err)
		}
		want := map[string]fs.FileMode{
			"data":                       0o755,
			"data/volumes":               0o700,
			"data/quarantine":            0o700,
			"data/snapshots":             0o700,
			"data/state":                 0o700,
			"data/state/projects":        0o700,
			"data/state/operations":      0o700,
			"data/state/records":         0o700,
			"ephemeral":                  0o755,
			"ephemeral/csi":              0o700,
			"ephemeral/csi/publications": 0o700,
			"ephemeral/log":              0o750,
			"kubelet":                    0o750,
			"kubelet/plugins":            0o750,
			"kubelet/plugins_registry":   0o750,
			"kubelet/pods":               0o750,
		}
		var seen int
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			if rel == "." {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			m, ok := want[rel]
			if !ok {
				t.Errorf("umask %#o: undeclared path %s created", umask, rel)
				return nil
			}
			seen++
			if !fi.IsDir() || fi.Mode().Perm() != m {
				t.Errorf("umask %#o: %s has mode %v, want directory %v", umask, rel, fi.Mode(), m)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != len(want) {
			t.Errorf("umask %#o: %d declared directories on disk, want %d", umask, seen, len(want))
		}
	}
}

func TestMkdirAllConvergesAndRefusesImpostors(t *testing.T) {
	r, dir := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	// A mode changed behind our back is restored; idempotent otherwise.
	vol := filepath.Join(dir, "data/volumes")
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(vol); fi.Mode().Perm() != 0o700 {
		t.Errorf("volumes mode after second MkdirAll: %v", fi.Mode())
	}
	// The placement root keeps its operator-chosen mode.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o711 {
		t.Errorf("root mode changed to %v", fi.Mode())
	}

	// A symlink where a directory is declared is refused, not followed.
	elsewhere := t.TempDir()
	state := filepath.Join(dir, "data/state")
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, state); err != nil {
		t.Fatal(err)
	}
	if err := r.MkdirAll(); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked state dir: err = %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("MkdirAll wrote through a symlink: %v", ents)
	}
	// A file where a directory is declared is refused.
	os.Remove(state)
	if err := os.WriteFile(state, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.MkdirAll(); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file as state dir: err = %v", err)
	}
}

func TestDriverDirectoryMkdirAll(t *testing.T) {
	r, _ := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	pd, err := r.Kubelet.Plugins.Driver("storage.plinth.dev")
	if err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	err = MkdirAll(&pd)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(pd.FullPath())
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("driver dir: %v %v", fi, err)
	}
}

func TestContains(t *testing.T) {
	var k KubeletDirectory
	if err := k.Place("/var/lib/kubelet"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"/var/lib/kubelet":                  true,
		"/var/lib/kubelet/pods/x/volumes/y": true,
		"/var/lib/kubelet/../kubelet/pods":  true,
		"/var/lib/kubelet/pods/../../etc":   false,
		"/var/lib/kubelet2/pods":            false,
		"/var/lib":                          false,
		"var/lib/kubelet/pods":              false,
		"/var/lib/kubelet/..data":           true,
		"/":                                 false,
	} {
		if got := k.Contains(p); got != want {
			t.Errorf("Contains(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestChildFileAndEntries(t *testing.T) {
	r, _ := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	pubs := &r.Ephemeral.CSI.Publications
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "a\x00b", ".hidden"} {
		if _, err := pubs.ChildFile(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ChildFile(%q): err = %v, want ErrInvalidName", bad, err)
		}
	}
	f, err := pubs.ChildFile("abc")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAtomic([]byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A temporary file left by a crash is not a record.
	if err := os.WriteFile(filepath.Join(pubs.FullPath(), ".tmp-abc-123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	names, err := pubs.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "abc" {
		t.Errorf("Entries = %q, want [abc]", names)
	}
	if err := f.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := f.Read(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read after Remove: %v", err)
	}
}

func TestSubtreeMkdirAllCreatesParents(t *testing.T) {
	r, dir := placedRoot(t)
	// Only the ephemeral subtree, before the root exists: what plinth-node
	// does to take its lock first.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Ephemeral.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(r.Ephemeral.CSI.Publications.FullPath()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("publications: %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("MkdirAll of a subtree created a sibling")
	}
}

func TestDirectorySync(t *testing.T) {
	r, _ := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	if err := r.Data.Volumes.Sync(); err != nil {
		t.Errorf("Sync of an existing directory: %v", err)
	}
	if err := os.Remove(r.Data.State.Operations.FullPath()); err != nil {
		t.Fatal(err)
	}
	if err := r.Data.State.Operations.Sync(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Sync of a missing directory: %v, want ErrNotExist", err)
	}
}

// TestResolve: links in the existing part of a path are resolved, the part
// that does not exist yet is kept, and a relative path becomes absolute.
func TestResolve(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "disk")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{filepath.Join(dir, "link"), real},
		{filepath.Join(dir, "link", "data", "volumes"), filepath.Join(real, "data", "volumes")},
		{filepath.Join(dir, "link", "..", "disk"), real},
		{filepath.Join(dir, "new", "tree"), filepath.Join(dir, "new", "tree")},
		{real + "/", real},
	} {
		if got, err := Resolve(c.in); err != nil || got != c.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	t.Chdir(filepath.Join(dir, "link"))
	if got, err := Resolve("data"); err != nil || got != filepath.Join(real, "data") {
		t.Errorf("Resolve of a relative path = %q, %v; want %q", got, err, filepath.Join(real, "data"))
	}
}
