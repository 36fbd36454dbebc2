package volume

import (
	"context"
	"maps"
	"testing"
	"time"
)

// TestLedgerFollowsEveryChange: the promise ledger the engine keeps as it
// creates, grows, copies, snapshots, quarantines, restores and deletes
// volumes equals, after each step, one built from disk from scratch, and
// bounds the exact measurement (Space): a stale ledger would let a Create
// be promised room that is promised already.
func TestLedgerFollowsEveryChange(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			assertLedgerFresh(t, m, what)
		}
		must("start", nil)
		_, err := m.Create(ctx, "fs", Filesystem, 16*MiB)
		must("create filesystem", err)
		_, err = m.Create(ctx, "blk", Block, 8*MiB)
		must("create block", err)
		writeImage(t, m, "blk", pattern(3, 4*MiB))
		if err := writeFile(t, fsPathOf(t, m, "fs"), "data", 2*MiB); err != nil {
			t.Fatal(err)
		}
		must("pods write", nil)
		_, err = m.Expand(ctx, "fs", 24*MiB)
		must("expand filesystem", err)
		_, err = m.Expand(ctx, "blk", 12*MiB)
		must("expand block", err)
		_, err = m.CreateSnapshot(ctx, "blk", "snap")
		must("snapshot", err)
		_, err = m.Create(ctx, "fs-copy", Filesystem, 24*MiB, FromVolume("fs"))
		must("copy filesystem", err)
		_, err = m.Create(ctx, "blk-copy", Block, 12*MiB, FromSnapshot("snap"))
		must("copy block from snapshot", err)
		must("record", m.SetReclaimPolicy(ctx, "fs-copy", ReclaimDelete))
		must("quarantine", m.Quarantine(ctx, "fs-copy", time.Now()))
		must("restore", m.Restore(ctx, "fs-copy"))
		must("quarantine again", m.Quarantine(ctx, "fs-copy", time.Now()))
		must("delete quarantined", m.DeleteQuarantined(ctx, "fs-copy"))
		must("delete snapshot", m.DeleteSnapshot(ctx, "snap"))
		must("delete block", m.Delete(ctx, "blk"))
		must("delete copy", m.Delete(ctx, "blk-copy"))
		_, err = m.Recover(ctx)
		must("recover", err)
	})
}

// assertLedgerFresh compares the ledger m kept with one built from disk
// now, and checks that it bounds the exact measurement. It leaves m with
// the ledger it kept, so that the next step tests what the engine keeps,
// not what this check built.
func assertLedgerFresh(t *testing.T, m *Manager, when string) {
	t.Helper()
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	kept, err := m.ledgerLocked()
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	saved := promiseLedger{built: true, entries: maps.Clone(kept.entries), sum: kept.sum}
	m.ledger = promiseLedger{}
	fresh, err := m.ledgerLocked()
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if fresh.sum != saved.sum || !maps.Equal(fresh.entries, saved.entries) {
		t.Errorf("after %s the ledger kept %+v (sum %+v), one built from disk %+v (sum %+v)",
			when, saved.entries, saved.sum, fresh.entries, fresh.sum)
	}
	s, err := m.space()
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if saved.sum.promised < s.Promised || saved.sum.unallocated < s.Unallocated {
		t.Errorf("after %s the ledger's bound (%+v) is below the measured promise %d and holes %d",
			when, saved.sum, s.Promised, s.Unallocated)
	}
	m.ledger = saved
}

// fsPathOf is filesystem volume id's directory.
func fsPathOf(t *testing.T, m *Manager, id string) string {
	t.Helper()
	_, p, err := m.Locate(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
