package localstorage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotLayout(t *testing.T) {
	r, root := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "..", "a/b", "Snap", "s.img"} {
		if _, err := r.Data.Snapshots.Snapshot(id); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Snapshot(%q) = %v, want ErrInvalidName", id, err)
		}
	}
	s, err := r.Data.Snapshots.Snapshot("snapshot-1")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "data", "snapshots", "snapshot-1")
	if s.FullPath() != want || s.Record.FullPath() != filepath.Join(want, "record") ||
		s.Image.FullPath() != filepath.Join(want, "image") || s.Tree.FullPath() != filepath.Join(want, "tree") {
		t.Errorf("snapshot paths %s %s %s %s, want below %s", s.FullPath(), s.Record.FullPath(), s.Image.FullPath(), s.Tree.FullPath(), want)
	}
	if err := os.Mkdir(s.FullPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "data", "snapshots", "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := r.Data.Snapshots.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "snapshot-1" || got[1].ID != "" || got[1].Reason == "" {
		t.Errorf("List() = %+v, want snapshot-1 and an unknown entry", got)
	}
}
