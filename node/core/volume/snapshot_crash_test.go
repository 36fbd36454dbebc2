package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"source.plinth.dev/test/volumetest"
)

// TestSnapshotCrashAtEveryStep stops CreateSnapshot, DeleteSnapshot and a
// restore at each of their steps, the way kill -9 would, and checks that
// no half snapshot is ever reported (GetSnapshot, ListSnapshots), that
// Recover (or the next call for the same ID) removes what was half made
// and finishes what was half deleted, leaving nothing behind, and that the
// same IDs work normally afterwards.
func TestSnapshotCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		for _, mode := range []Mode{Filesystem, Block} {
			src := "src-" + mode.String()
			if _, err := m.Create(ctx, src, mode, 4*MiB); err != nil {
				t.Fatal(err)
			}
			if mode == Filesystem {
				_, dir, _ := m.Locate(ctx, src)
				volumetest.SampleTree(t, dir)
			}
			// A crash before the record says "ready": no snapshot.
			for i, point := range []string{"snapshot:mkdir", "snapshot:intent", "snapshot:data"} {
				id := fmt.Sprintf("s-%s-%d", mode, i)
				if !crashAt(m, point, func() { _, _ = m.CreateSnapshot(ctx, src, id) }) {
					t.Fatalf("CreateSnapshot %v never reached %s", mode, point)
				}
				assertNoSnapshot(t, m, id, "after a crash at "+point)
				recs, err := m.Recover(ctx)
				if err != nil || len(recs) != 1 || recs[0].Err != nil || recs[0].ID != "snapshot/"+id {
					t.Errorf("Recover after a crash at %s = %+v, %v; want one removal of snapshot/%s", point, recs, err, id)
				}
				assertSnapshotGone(t, m, id)
				// The next call alone settles too.
				crashAt(m, point, func() { _, _ = m.CreateSnapshot(ctx, src, id) })
				if s, err := m.CreateSnapshot(ctx, src, id); err != nil || !s.ReadyToUse {
					t.Fatalf("CreateSnapshot after a crash at %s = %+v, %v", point, s, err)
				}
			}
			// A crash after it: the snapshot is complete.
			id := "s-" + mode.String() + "-done"
			crashAt(m, "snapshot:done", func() { _, _ = m.CreateSnapshot(ctx, src, id) })
			if s, err := m.GetSnapshot(ctx, id); err != nil || !s.ReadyToUse {
				t.Errorf("GetSnapshot after a crash once the snapshot was complete = %+v, %v", s, err)
			}
			// Deletion: never a snapshot half there.
			for _, point := range []string{"snapshot-delete:intent", "snapshot-delete:data"} {
				if _, err := m.CreateSnapshot(ctx, src, id); err != nil {
					t.Fatal(err)
				}
				if !crashAt(m, point, func() { _ = m.DeleteSnapshot(ctx, id) }) {
					t.Fatalf("DeleteSnapshot never reached %s", point)
				}
				assertNoSnapshot(t, m, id, "after a crash at "+point)
				if _, err := m.Recover(ctx); err != nil {
					t.Fatal(err)
				}
				assertSnapshotGone(t, m, id)
			}
			// A restore stopped at each step is a half-made volume:
			// pending, removed by Recover.
			snapID := "s-" + mode.String() + "-0"
			points := map[Mode][]string{
				Filesystem: {"create:intent", "create:mkdir", "copy:mkdir", "copy:tree", "create:done"},
				Block:      {"create:intent", "create:image", "copy:cloned", "create:done"},
			}[mode]
			for i, point := range points {
				vol := fmt.Sprintf("r-%s-%d", mode, i)
				if !crashAt(m, point, func() { _, _ = m.Create(ctx, vol, mode, 8*MiB, FromSnapshot(snapID)) }) {
					t.Fatalf("restore of a %v volume never reached %s", mode, point)
				}
				assertPending(t, m, vol, OpCreate)
				if _, err := m.Recover(ctx); err != nil {
					t.Fatal(err)
				}
				assertGone(t, m, vol)
				if _, err := m.Create(ctx, vol, mode, 8*MiB, FromSnapshot(snapID)); err != nil {
					t.Fatalf("restore after a crash at %s: %v", point, err)
				}
			}
		}
		assertAllSettled(t, m, "left over after all crashes")
	})
}

// assertNoSnapshot fails if snapshot id is reported in any way.
func assertNoSnapshot(t *testing.T, m *Manager, id, when string) {
	t.Helper()
	snaps, err := m.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.ID == id {
			t.Errorf("%s: ListSnapshots reports %+v", when, s)
		}
	}
}

// assertSnapshotGone fails unless snapshot id left no trace.
func assertSnapshotGone(t *testing.T, m *Manager, id string) {
	t.Helper()
	s, err := m.Data.Snapshots.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.FullPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot directory %s still exists (%v)", s.FullPath(), err)
	}
	if _, err := m.GetSnapshot(context.Background(), id); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSnapshot(%s) = %v, want ErrNotFound", id, err)
	}
}

// TestCopySourceCannotGoWhileCopied: the source of a copy is locked while
// it is copied; a Delete of it waits, and succeeds after the copy, which
// is whole.
func TestCopySourceCannotGoWhileCopied(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		if _, err := m.Create(ctx, "src", Block, 4*MiB); err != nil {
			t.Fatal(err)
		}
		writeImage(t, m, "src", pattern(3, 4*MiB))
		deleted := make(chan error, 1)
		m.crashHook = func(p string) {
			if p != "copy:cloned" {
				return
			}
			go func() { deleted <- m.Delete(ctx, "src") }()
			select {
			case err := <-deleted:
				t.Errorf("Delete of the source returned (%v) while it was being copied", err)
			case <-time.After(200 * time.Millisecond):
			}
		}
		_, err := m.Create(ctx, "clone", Block, 4*MiB, FromVolume("src"))
		m.crashHook = nil
		if err != nil {
			t.Fatal(err)
		}
		if err := <-deleted; err != nil {
			t.Fatalf("Delete of the source after the copy: %v", err)
		}
		if got := readImage(t, m, "clone"); string(got) != string(pattern(3, 4*MiB)) {
			t.Error("the clone does not read as its source")
		}
		if _, err := m.Create(ctx, "clone2", Block, 4*MiB, FromVolume("src")); !errors.Is(err, ErrNotFound) {
			t.Errorf("cloning a deleted volume = %v, want ErrNotFound", err)
		}
		assertGone(t, m, "clone2")
	})
}
