package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRecoverNeverRemovesAVolumeInUse: an intent record of a create that
// comes back over a volume that is in use (bind-mounted as the CSI plugin
// publishes it, or its image served by a loop device) is a create that
// finished and was handed out; a power loss that undid the record's
// removal, or a bug, must not make Recover, a retried Create or Delete
// roll it back. Each refuses with ErrInUse and the data stays; once the
// volume is no longer used, Recover rolls the create back as before.
func TestRecoverNeverRemovesAVolumeInUse(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, t.TempDir())
	for _, tc := range []struct {
		id   string
		mode Mode
	}{{"fs", Filesystem}, {"blk", Block}} {
		if _, err := m.Create(ctx, tc.id, tc.mode, MiB); err != nil {
			t.Fatal(err)
		}
		_, path, err := m.Locate(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		var release func()
		if tc.mode == Filesystem {
			if err := writeFile(t, path, "data", 10); err != nil {
				t.Fatal(err)
			}
			target := t.TempDir()
			if err := unix.Mount(path, target, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			release = func() {
				if err := unix.Unmount(target, 0); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			d := attach(t, path, false)
			release = func() {
				if err := d.Detach(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := m.writeIntent(tc.id, intent{Op: OpCreate, Mode: tc.mode.String(), Bytes: MiB}); err != nil {
			t.Fatal(err)
		}

		rs, err := m.Recover(ctx)
		if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, ErrInUse) {
			t.Errorf("%s: Recover over a volume in use = %+v, %v; want one recovery refused with ErrInUse", tc.id, rs, err)
		}
		if _, err := m.Create(ctx, tc.id, tc.mode, MiB); !errors.Is(err, ErrInUse) {
			t.Errorf("%s: a retried Create over a volume in use = %v, want ErrInUse", tc.id, err)
		}
		if err := m.Delete(ctx, tc.id); !errors.Is(err, ErrInUse) {
			t.Errorf("%s: Delete of a volume in use with a create intent = %v, want ErrInUse", tc.id, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: the volume in use is gone: %v", tc.id, err)
		}
		if tc.mode == Filesystem {
			if _, err := os.Stat(filepath.Join(path, "data")); err != nil {
				t.Errorf("%s: its data is gone: %v", tc.id, err)
			}
		}

		release()
		if rs, err := m.Recover(ctx); err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Errorf("%s: Recover once the volume is unused = %+v, %v; want the create rolled back", tc.id, rs, err)
		}
		assertGone(t, m, tc.id)
	}
}

// TestRecoverSyncsFirst: a process that died owing a sync (a durable step
// failed, see durable) leaves no memory of the debt, so a new Manager's
// Recover syncs the whole data filesystem before it reads or changes
// anything: with that sync failing it fails and leaves an interrupted
// create as it found it; with it working, the sync comes first.
func TestRecoverSyncsFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first := newManager(t, dir)
	first.syncHook = func(step string) error {
		if step == "clear-intent" {
			return fmt.Errorf("injected: %w", unix.EIO)
		}
		return nil
	}
	if _, err := first.Create(ctx, "v", Block, MiB); !errors.Is(err, unix.EIO) {
		t.Fatalf("Create with the intent's removal failing to sync: %v, want EIO", err)
	}
	// And a create it was in the middle of when it died.
	if err := first.writeIntent("p", intent{Op: OpCreate, Mode: Block.String(), Bytes: MiB}); err != nil {
		t.Fatal(err)
	}

	// The restarted node: a new Manager, no debt in memory.
	m := newManager(t, dir)
	var steps []string
	failSync := true
	m.syncHook = func(step string) error {
		steps = append(steps, step)
		if step == "filesystem" && failSync {
			return fmt.Errorf("injected: %w", unix.EIO)
		}
		return nil
	}
	if rs, err := m.Recover(ctx); !errors.Is(err, unix.EIO) || len(rs) != 0 {
		t.Fatalf("Recover with the filesystem sync failing = %+v, %v; want EIO and nothing done", rs, err)
	}
	if in, err := m.readIntent("p"); in == nil || err != nil {
		t.Errorf("the interrupted create's record after a failed Recover: %+v, %v; want it untouched", in, err)
	}
	failSync = false
	steps = nil
	if rs, err := m.Recover(ctx); err != nil || len(rs) != 1 || rs[0].ID != "p" || rs[0].Err != nil {
		t.Fatalf("Recover = %+v, %v; want the create of p rolled back", rs, err)
	}
	if len(steps) < 2 || steps[0] != "filesystem" {
		t.Errorf("durable steps of Recover: %v, want the filesystem sync before the rollback's", steps)
	}
	if _, err := m.Stat(ctx, "v"); err != nil {
		t.Errorf("volume v after the recovery: %v, want it kept (its create had finished)", err)
	}
}
