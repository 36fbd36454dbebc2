package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeleteOnFullFilesystem: the volume that takes all the room a node
// offers (Space.Available), written full by its pod, can still be
// deleted, which is the one operation that gives the room back. Delete
// writes an intent record first (intent.go); without room kept for the
// engine's own state (StateReserve) that write failed with ENOSPC and
// the full node could not be emptied.
func TestDeleteOnFullFilesystem(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, b backend) {
		if !b.enforced {
			return // the host's filesystem is shared: it cannot be filled
		}
		for _, mode := range []Mode{Filesystem, Block} {
			t.Run(mode.String(), func(t *testing.T) {
				m := newManagerOn(t, b)
				n := space(t, m).Available(NoOvercommit)
				if _, err := m.Create(ctx, "full", mode, n); err != nil {
					t.Fatalf("Create of the available %d bytes: %v", n, err)
				}
				fsPath, _ := m.paths("full")
				if mode == Filesystem {
					fillToTheByte(t, fsPath)
				}
				if err := m.Delete(ctx, "full"); err != nil {
					t.Fatalf("Delete of the volume that fills the node: %v", err)
				}
				assertGone(t, m, "full")
			})
		}
	})
}

// fillToTheByte allocates to a new file in dir, as a pod would, until
// the filesystem or a quota refuses even a single block: first by MiB
// (like fill in share_test.go), then by 4 KiB, so that less than a block
// of the volume's room is left.
func fillToTheByte(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	for _, chunk := range []int64{MiB, 4 << 10} {
		err := asPodUser(t, func() error {
			for ; ; off += chunk {
				if err := fallocate(f, off, chunk); err != nil {
					return err
				}
			}
		})
		if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
			t.Fatalf("filling %s: %v after %d bytes, want ENOSPC or EDQUOT", dir, err, off)
		}
	}
	t.Logf("filled %d bytes", off)
}
