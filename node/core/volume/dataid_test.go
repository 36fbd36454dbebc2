package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestDataIDMarksAUsedDirectory: a new data directory has no mark; the
// first volume writes one, which a restart reads back and no later volume
// changes; a directory holding volumes from before marks existed adopts
// one at start.
func TestDataIDMarksAUsedDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := newManager(t, dir)
	if id := m.DataID(); id != "" {
		t.Fatalf("a new data directory has data ID %q, want none", id)
	}
	if _, err := m.Create(ctx, "pvc-a", Block, MiB); err != nil {
		t.Fatal(err)
	}
	first := m.DataID()
	if len(first) != 32 {
		t.Fatalf("after the first volume, data ID %q, want 32 hex digits", first)
	}
	if _, err := m.Create(ctx, "pvc-b", Block, MiB); err != nil {
		t.Fatal(err)
	}
	if again := newManager(t, dir).DataID(); again != first || m.DataID() != first {
		t.Errorf("data ID %q after another volume and %q after a restart, want %q", m.DataID(), again, first)
	}

	// A directory of an older Plinth: volumes, no mark.
	if err := os.Remove(m.Data.State.DataID.FullPath()); err != nil {
		t.Fatal(err)
	}
	adopted := newManager(t, dir).DataID()
	if adopted == "" || adopted == first {
		t.Errorf("a directory with volumes and no mark got data ID %q at start, want a new one", adopted)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "state", "data-id")); err != nil || string(b) != adopted+"\n" {
		t.Errorf("state/data-id holds %q (%v), want %q", b, err, adopted+"\n")
	}

	// Deleting every volume keeps the mark: the directory was used.
	for _, id := range []string{"pvc-a", "pvc-b"} {
		if err := m.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if id := newManager(t, dir).DataID(); id != adopted {
		t.Errorf("after every volume was deleted, data ID %q, want %q", id, adopted)
	}
}
