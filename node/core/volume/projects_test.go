package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// TestRestoreProjectIDsEndsAnEscape writes past a volume's size the way a
// pod in the host's user namespace can (a directory of it moved to project
// 0), sees that Stat does not count it, and checks that RestoreProjectIDs
// makes the volume's usage and the next write tell the truth again.
func TestRestoreProjectIDsEndsAnEscape(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			if _, err := m.Create(ctx, "e", Filesystem, 4*MiB); err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "e")
			out := filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetProjectID(out, 0, false); err != nil {
				t.Fatal(err)
			}
			if err := asPodUser(t, func() error { return writeFile(t, out, "big", 8*MiB) }); err != nil {
				t.Fatalf("the escape did not work (8 MiB into a 4 MiB volume's directory moved to project 0): %v", err)
			}
			st, err := m.Stat(ctx, "e")
			if err != nil {
				t.Fatal(err)
			}
			if st.UsedBytes > MiB {
				t.Fatalf("Stat counts %d bytes before the repair; the escaped 8 MiB should not be in it", st.UsedBytes)
			}

			r, err := m.RestoreProjectIDs(ctx, "e", nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Strays != 2 || r.StrayBytes < 8*MiB || r.FirstStray != "out" || r.Failed != 0 {
				t.Errorf("RestoreProjectIDs = %+v, want 2 strays (out, out/big) holding 8 MiB", r)
			}
			st, err = m.Stat(ctx, "e")
			if err != nil {
				t.Fatal(err)
			}
			if st.UsedBytes < 8*MiB || st.AvailableBytes != 0 {
				t.Errorf("Stat after the repair = used %d, available %d; want the 8 MiB counted and nothing available", st.UsedBytes, st.AvailableBytes)
			}
			err = asPodUser(t, func() error { return writeFile(t, dir, "more", 64<<10) })
			if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Errorf("writing into the repaired volume over its size: %v, want ENOSPC or EDQUOT", err)
			}

			// Nothing to restore in a block volume; an unknown one is not
			// found.
			if _, err := m.Create(ctx, "blk", Block, MiB); err != nil {
				t.Fatal(err)
			}
			if r, err := m.RestoreProjectIDs(ctx, "blk", nil); err != nil || !reflect.DeepEqual(r, fsquota.Restored{}) {
				t.Errorf("RestoreProjectIDs of a block volume = %+v, %v; want nothing done", r, err)
			}
			if _, err := m.RestoreProjectIDs(ctx, "nope", nil); !errors.Is(err, ErrNotFound) {
				t.Errorf("RestoreProjectIDs of an unknown volume: %v, want ErrNotFound", err)
			}
		})
	}
}
