package localstorage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func stateFile(t *testing.T) (File, string) {
	t.Helper()
	r, _ := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	f, err := r.Data.State.Projects.ChildFile("1234")
	if err != nil {
		t.Fatal(err)
	}
	return f, r.Data.State.Projects.FullPath()
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteAtomic(t *testing.T) {
	f, dir := stateFile(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	if err := f.WriteAtomic([]byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAtomic([]byte("second"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := f.Read()
	if err != nil || string(got) != "second" {
		t.Errorf("content %q, %v; want %q", got, err, "second")
	}
	fi, err := os.Stat(f.FullPath())
	if err != nil {
		t.Fatal(err)
	}
	// The mode is exactly the asked one, neither the umask's nor the first
	// write's.
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode())
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0] != "1234" {
		t.Errorf("directory holds %q, want only the file", names)
	}
}

func TestWriteAtomicNoSync(t *testing.T) {
	f, dir := stateFile(t)
	if err := f.WriteAtomicNoSync([]byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAtomicNoSync([]byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := f.Read()
	fi, serr := os.Stat(f.FullPath())
	if err != nil || serr != nil || string(got) != "two" || fi.Mode().Perm() != 0o640 {
		t.Errorf("content %q (%v), mode %v (%v)", got, err, fi.Mode(), serr)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("temporary file left behind: %q", names)
	}
}

func TestWriteAtomicFailedRenameKeepsOldContent(t *testing.T) {
	f, dir := stateFile(t)
	if err := f.WriteAtomic([]byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("injected rename failure")
	var renamedFrom string
	err := writeAtomic(f.FullPath(), []byte("new"), 0o600, func(from, to string) error {
		renamedFrom = from
		// The new content must be complete and on disk before the rename.
		b, err := os.ReadFile(from)
		if err != nil || string(b) != "new" {
			t.Errorf("temporary file before rename: %q, %v", b, err)
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "renaming") {
		t.Errorf("err = %v, want the wrapped rename failure", err)
	}
	if got, _ := f.Read(); string(got) != "old" {
		t.Errorf("content after failed write %q, want %q", got, "old")
	}
	if filepath.Dir(renamedFrom) != dir || !strings.HasPrefix(filepath.Base(renamedFrom), tempPrefix) {
		t.Errorf("temporary file %q is not a dot file in the same directory", renamedFrom)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("temporary file left behind: %q", names)
	}
}

func TestWriteAtomicOverDirectoryFails(t *testing.T) {
	// A real rename failure: the target is a non-empty directory.
	f, dir := stateFile(t)
	if err := os.MkdirAll(filepath.Join(f.FullPath(), "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAtomic([]byte("x"), 0o600); err == nil {
		t.Fatal("writing over a directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(f.FullPath(), "keep")); err != nil {
		t.Errorf("directory content lost: %v", err)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("temporary file left behind: %q", names)
	}
}

func TestWriteAtomicRefusesSpecialModes(t *testing.T) {
	f, dir := stateFile(t)
	if err := f.WriteAtomic([]byte("x"), 0o4755); err == nil {
		t.Error("setuid mode accepted")
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("files created by a refused write: %q", names)
	}
}

func TestWriteAtomicMissingDirectory(t *testing.T) {
	var r Root
	if err := r.Place(filepath.Join(t.TempDir(), "absent")); err != nil {
		t.Fatal(err)
	}
	if err := r.Ephemeral.PID.WriteAtomic([]byte("1"), 0o644); err == nil || !strings.Contains(err.Error(), "temporary file") {
		t.Errorf("write into a missing directory: %v", err)
	}
}

func TestRemoveStaleTemporaryFiles(t *testing.T) {
	r, _ := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	pubs := r.Ephemeral.CSI.Publications.FullPath()
	ops := r.Data.State.Operations.FullPath()
	old := time.Now().Add(-time.Hour)
	mk := func(p string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	stale1 := filepath.Join(pubs, tempPrefix+"a-1")
	stale2 := filepath.Join(ops, tempPrefix+"b-2")
	fresh := filepath.Join(ops, tempPrefix+"c-3") // a write in flight
	record := filepath.Join(ops, "record")        // old, but a record
	mk(stale1, old)
	mk(stale2, old)
	mk(fresh, time.Now())
	mk(record, old)
	removed, err := RemoveStaleTemporaryFiles(r, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("removed %q, want the two stale temporary files", removed)
	}
	for p, want := range map[string]bool{stale1: false, stale2: false, fresh: true, record: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", p, err == nil, want)
		}
	}
}
