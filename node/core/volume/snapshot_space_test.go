package volume

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestCopiesReserveWhatTheyShare: a snapshot and a volume restored from it
// take no free space, but the accounting keeps what they share reserved,
// so that a volume filling the rest of the node cannot take the room the
// snapshot's source needs to overwrite its blocks: after a snapshot of a
// fully allocated block volume and a new volume of every byte still
// available, the source can still be overwritten end to end. A snapshot
// whose reservation does not fit is refused, leaving nothing.
func TestCopiesReserveWhatTheyShare(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		space := func() Space {
			t.Helper()
			settleFreeSpace(t, m)
			s, err := m.Space(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		start := space()
		size := start.Available(NoOvercommit) / 8 / MiB * MiB
		if _, err := m.Create(ctx, "src", Block, size); err != nil {
			t.Fatal(err)
		}
		// Written, as a pod would: XFS does not share unwritten
		// (allocated, never written) extents but leaves holes in the
		// clone, which hold nothing and need no reservation.
		writeImage(t, m, "src", pattern(4, int(size)))
		before := space()
		if _, err := m.CreateSnapshot(ctx, "src", "snap"); err != nil {
			t.Fatal(err)
		}
		after := space()
		if got := after.Promised - before.Promised; got != size {
			t.Errorf("a snapshot of a %d-byte block volume adds %d bytes to the promised room, want %d", size, got, size)
		}
		if lost := after.Available(NoOvercommit) - (before.Available(NoOvercommit) - size); lost < -MiB || lost > MiB {
			t.Errorf("Available went from %d to %d after a snapshot of %d bytes; want it %d smaller, within 1 MiB",
				before.Available(NoOvercommit), after.Available(NoOvercommit), size, size)
		}

		// Fill the node, then overwrite the snapshot's source in full.
		// The Delete below still finds room for its intent record in
		// StateReserve (TestDeleteOnFullFilesystem).
		fill := space().Available(NoOvercommit)
		if _, err := m.Create(ctx, "fill", Block, fill); err != nil {
			t.Fatalf("a volume of all %d bytes available: %v", fill, err)
		}
		_, img, _ := m.Locate(ctx, "src")
		f, err := os.OpenFile(img, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // on failure; closed below otherwise
		chunk := pattern(5, MiB)
		for off := int64(0); off < size; off += MiB {
			if _, err := f.WriteAt(chunk, off); err != nil {
				t.Fatalf("overwriting the snapshot's source at %d of %d bytes: %v", off, size, err)
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("overwriting the snapshot's source (%d bytes): %v", size, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		s := space()
		t.Logf("after the overwrite: %d bytes free, %d available", s.Free, s.Available(NoOvercommit))
		if err := m.Delete(ctx, "fill"); err != nil {
			t.Fatal(err)
		}

		// A snapshot of a volume as large as what is left cannot be
		// reserved.
		bigSize := space().Available(NoOvercommit) * 2 / 3 / MiB * MiB
		if _, err := m.Create(ctx, "big", Block, bigSize); err != nil {
			t.Fatal(err)
		}
		writeImage(t, m, "big", pattern(6, int(bigSize)))
		if _, err := m.CreateSnapshot(ctx, "big", "too-big"); !errors.Is(err, ErrNoSpace) {
			t.Errorf("a snapshot whose reservation does not fit = %v, want ErrNoSpace", err)
		}
		assertSnapshotGone(t, m, "too-big")
		if err := m.Delete(ctx, "big"); err != nil {
			t.Fatal(err)
		}

		// A restore reserves what it shares; deleting copies gives the
		// reservations back.
		before = space()
		if _, err := m.Create(ctx, "restored", Block, size+4*MiB, FromSnapshot("snap")); err != nil {
			t.Fatal(err)
		}
		after = space()
		if got := after.Promised - before.Promised; got != size {
			t.Errorf("a restore sharing %d bytes adds %d to the promised room, want %d", size, got, size)
		}
		if got := before.Free - after.Free; got < 4*MiB || got > 5*MiB {
			t.Errorf("a restore 4 MiB larger than its snapshot took %d bytes of free space, want 4 MiB", got)
		}
		if err := m.DeleteSnapshot(ctx, "snap"); err != nil {
			t.Fatal(err)
		}
		if err := m.Delete(ctx, "restored"); err != nil {
			t.Fatal(err)
		}
		if got := space().Promised; got != before.Promised-size {
			t.Errorf("promised room after deleting the copies = %d, want %d", got, before.Promised-size)
		}
	})
}

// settleFreeSpace waits until the data filesystem's usage stops changing:
// XFS frees a deleted file's blocks in the background (inodegc), and a
// syncfs does not always wait for that.
func settleFreeSpace(t testing.TB, m *Manager) {
	t.Helper()
	last := usedBytes(t, m)
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		now := usedBytes(t, m)
		if now == last {
			return
		}
		last = now
	}
	t.Fatal("the data filesystem's usage kept changing for 2 s")
}

// TestSnapshotOvercommitLendsPromisedRoom: a snapshot's reservation may
// take room promised to others only under an over-commit ratio, as a
// volume's may. With a first snapshot promising a quarter of the room, a
// block volume of 9/32 of it can be snapshotted under ratio 2 (half of
// that promise is lent) and not without over-commit; the refused attempt
// leaves nothing. A snapshot refuses the options of a volume.
func TestSnapshotOvercommitLendsPromisedRoom(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		settleFreeSpace(t, m)
		start, err := m.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		room := start.Available(NoOvercommit)
		sizeA, sizeB := room/4/MiB*MiB, room*9/32/MiB*MiB
		for _, v := range []struct {
			id   string
			size int64
		}{{"a", sizeA}, {"b", sizeB}} {
			if _, err := m.Create(ctx, v.id, Block, v.size); err != nil {
				t.Fatal(err)
			}
			writeImage(t, m, v.id, pattern(7, int(v.size)))
		}
		if _, err := m.CreateSnapshot(ctx, "a", "snap-a"); err != nil {
			t.Fatalf("a snapshot of a quarter of the room: %v", err)
		}
		if _, err := m.CreateSnapshot(ctx, "b", "snap-b"); !errors.Is(err, ErrNoSpace) {
			t.Errorf("a snapshot that fits only in lent room, without over-commit = %v, want ErrNoSpace", err)
		}
		assertSnapshotGone(t, m, "snap-b")
		if _, err := m.CreateSnapshot(ctx, "b", "snap-b", WithRootDirMode(0o770)); !errors.Is(err, ErrInvalid) {
			t.Errorf("a snapshot with a root directory mode = %v, want ErrInvalid", err)
		}
		snap, err := m.CreateSnapshot(ctx, "b", "snap-b", WithOvercommit(2))
		if err != nil {
			t.Fatalf("the same snapshot under over-commit 2: %v", err)
		}
		if snap.ReservedBytes != sizeB {
			t.Errorf("the lent snapshot reserves %d bytes, want %d: lending changes the check, not the reservation", snap.ReservedBytes, sizeB)
		}
	})
}
