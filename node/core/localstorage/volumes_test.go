package localstorage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestVolumeAccessorsValidate(t *testing.T) {
	r, _ := placedRoot(t)
	for _, id := range []string{"", "..", "../../etc", "a/b", "x\x00", "pvc-1.img"} {
		if _, err := r.Data.Volumes.Filesystem(id); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Filesystem(%q): %v", id, err)
		}
		if _, err := r.Data.Volumes.Block(id); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Block(%q): %v", id, err)
		}
	}
}

func TestVolumesList(t *testing.T) {
	r, _ := placedRoot(t)
	if err := r.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	vols := r.Data.Volumes.FullPath()
	mk := func(name string, dir bool) {
		t.Helper()
		p := filepath.Join(vols, name)
		var err error
		if dir {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fsv, _ := r.Data.Volumes.Filesystem("pvc-a")
	if err := os.Mkdir(fsv.FullPath(), 0o755); err != nil {
		t.Fatal(err)
	}
	bv, _ := r.Data.Volumes.Block("pvc-b")
	if err := bv.WriteAtomic([]byte("img"), 0o600); err != nil {
		t.Fatal(err)
	}
	mk("pvc-c", false)      // a file where a directory belongs
	mk("pvc-d.img", true)   // a directory where an image belongs
	mk(".tmp-pvc-e", false) // leftover temporary file
	mk("Foreign", true)     // not our name
	if err := os.Symlink("/etc", filepath.Join(vols, "pvc-f")); err != nil {
		t.Fatal(err)
	}

	got, err := r.Data.Volumes.List()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		id   string
		kind VolumeKind
	}{
		".tmp-pvc-e": {"", VolumeUnknown},
		"Foreign":    {"", VolumeUnknown},
		"pvc-a":      {"pvc-a", VolumeFilesystem},
		"pvc-b.img":  {"pvc-b", VolumeBlock},
		"pvc-c":      {"", VolumeUnknown},
		"pvc-d.img":  {"", VolumeUnknown},
		"pvc-f":      {"", VolumeUnknown},
	}
	if len(got) != len(want) {
		t.Fatalf("List returned %d entries, want %d: %+v", len(got), len(want), got)
	}
	for _, e := range got {
		w, ok := want[e.Name]
		if !ok || e.ID != w.id || e.Kind != w.kind {
			t.Errorf("entry %+v, want %+v", e, w)
		}
		if e.Kind == VolumeUnknown && e.Reason == "" {
			t.Errorf("unknown entry %q has no reason", e.Name)
		}
	}
}
