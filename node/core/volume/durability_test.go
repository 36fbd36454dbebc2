package volume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoSuccessBeforeDurable: when a step that makes a change durable
// fails, the retry that finds the change in place (the intent record
// removed, the record reading back equal, the image gone) reports success
// only after a sync of the whole data filesystem has succeeded; while that
// sync fails too, the retry fails, and the volume is kept. Without this,
// the retried Create would hand out a volume whose intent record a power
// loss could bring back, and Recover would then remove the volume with its
// pod's data.
func TestNoSuccessBeforeDurable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		ctx := context.Background()
		failing := map[string]bool{}
		settled := 0 // syncs of the whole filesystem that succeeded
		m.syncHook = func(step string) error {
			if failing[step] {
				return fmt.Errorf("injected failure of step %s: %w", step, unix.EIO)
			}
			if step == "filesystem" {
				settled++
			}
			return nil
		}
		// retry runs op with the given step failing, then with the sync
		// of the whole filesystem failing, then with nothing failing: it
		// must fail, fail, and succeed after exactly one sync.
		retry := func(what, step string, op func() error) {
			t.Helper()
			failing[step] = true
			if err := op(); !errors.Is(err, unix.EIO) {
				t.Fatalf("%s with step %s failing: %v, want the injected EIO", what, step, err)
			}
			failing[step], failing["filesystem"] = false, true
			if err := op(); !errors.Is(err, unix.EIO) {
				t.Errorf("%s retried while the filesystem cannot be synced: %v, want the injected EIO", what, err)
			}
			failing["filesystem"] = false
			before := settled
			if err := op(); err != nil {
				t.Fatalf("%s retried with syncs working: %v", what, err)
			}
			if settled != before+1 {
				t.Errorf("%s: %d syncs of the filesystem before success, want 1", what, settled-before)
			}
			if err := op(); err != nil || settled != before+1 {
				t.Errorf("%s once more: %v after %d more syncs; want success with the debt settled", what, err, settled-before-1)
			}
		}

		retry("creating a volume", "clear-intent", func() error {
			_, err := m.Create(ctx, "v", Block, MiB)
			return err
		})
		if in, err := m.readIntent("v"); in != nil || err != nil {
			t.Errorf("intent record after the Create succeeded: %+v, %v", in, err)
		}
		retry("growing the volume", "expand:image", func() error {
			_, err := m.Expand(ctx, "v", 2*MiB)
			return err
		})
		if m.CapacityEnforced() {
			// A quota raised is made durable by a sync of its own.
			if _, err := m.Create(ctx, "f", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			retry("growing a filesystem volume", "expand:quota", func() error {
				_, err := m.Expand(ctx, "f", 2*MiB)
				return err
			})
		}
		retry("recording Retain", "record", func() error { return m.SetReclaimPolicy(ctx, "v", ReclaimRetain) })
		if p, err := m.ReclaimPolicy(ctx, "v"); p != ReclaimRetain || err != nil {
			t.Errorf("reclaim policy %q, %v; want %q", p, err, ReclaimRetain)
		}
		retry("deleting the volume", "delete:volumes-dir", func() error { return m.Delete(ctx, "v") })
		entries, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(entries, func(e Entry) bool { return e.ID == "v" }) {
			t.Errorf("volume v listed after its deletion: %+v", entries)
		}
	})
}
