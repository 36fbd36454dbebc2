package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/ktest"
)

// TestExpandRefreshesPublishedBlockDevice: a block volume served by a loop
// device (as a published volume is) shows its new size on the device as
// soon as Expand returns, also when Expand is repeated after the image grew
// (the retry after a crash between growing and refreshing), and a
// read-only device stays read-only.
func TestExpandRefreshesPublishedBlockDevice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		m := newManagerOn(t, b)
		if _, err := m.Create(ctx, "blk", Block, MiB); err != nil {
			t.Fatal(err)
		}
		_, img := m.paths("blk")
		var devs []*loop.Device
		for _, ro := range []bool{false, true} {
			devs = append(devs, attach(t, img, ro))
		}
		if _, err := m.Expand(ctx, "blk", 4*MiB); err != nil {
			t.Fatalf("Expand: %v", err)
		}
		for i, d := range devs {
			if size, err := d.Size(); err != nil || size != 4*MiB {
				t.Errorf("device %d after Expand: size %d (%v), want %d", i, size, err, 4*MiB)
			}
		}
		if fl, err := devs[1].Flags(); err != nil || !fl.ReadOnly {
			t.Errorf("read-only device after Expand: flags %+v (%v), want read-only", fl, err)
		}
		// The image grows behind the devices' back (as if Expand had
		// crashed after growing it); the next Expand still refreshes them.
		if err := os.Truncate(img, 8*MiB); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(img, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := fallocate(f, 4*MiB, 4*MiB); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := m.Expand(ctx, "blk", 8*MiB); err != nil {
			t.Fatalf("repeated Expand: %v", err)
		}
		if size, err := devs[0].Size(); err != nil || size != 8*MiB {
			t.Errorf("device after repeated Expand: size %d (%v), want %d", size, err, 8*MiB)
		}
	})
}

// TestPublishedByAnEarlierContainer: a block volume attached through a
// mount this process cannot reach any more (the mount namespace of the
// node agent's container before it restarted; here a bind mount of the
// data directory, lazily unmounted) is still found in use: Delete refuses
// it, and Expand shows the new size on its device.
func TestPublishedByAnEarlierContainer(t *testing.T) {
	ktest.RequireRoot(t)
	ctx := context.Background()
	m := newManager(t, t.TempDir())
	if _, err := m.Create(ctx, "blk", Block, MiB); err != nil {
		t.Fatal(err)
	}
	_, img := m.paths("blk")
	mnt := t.TempDir()
	if err := unix.Mount(m.Data.FullPath(), mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(m.Data.FullPath(), img)
	if err != nil {
		t.Fatal(err)
	}
	d := attach(t, filepath.Join(mnt, rel), false)
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "blk"); !errors.Is(err, ErrInUse) {
		t.Errorf("Delete of a volume attached by an earlier container = %v, want ErrInUse", err)
	}
	if _, err := m.Expand(ctx, "blk", 4*MiB); err != nil {
		t.Fatalf("Expand: %v", err)
	}
	if size, err := d.Size(); err != nil || size != 4*MiB {
		t.Errorf("device attached by an earlier container after Expand: size %d (%v), want %d", size, err, 4*MiB)
	}
}

// TestDiscardThroughTheLoopDevice: on the real kernel, a discard sent to a
// block volume's loop device (BLKDISCARD, what mkfs sends by default)
// punches a hole in the image; the accounting keeps the freed part from
// new volumes and the volume stays normal.
func TestDiscardThroughTheLoopDevice(t *testing.T) {
	ktest.RequireVM(t)
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		m := newManagerOn(t, b)
		if _, err := m.Create(ctx, "blk", Block, 8*MiB); err != nil {
			t.Fatal(err)
		}
		before := space(t, m)
		_, img := m.paths("blk")
		d := attach(t, img, false)
		dev, err := os.OpenFile(d.Path(), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		rng := [2]uint64{MiB, 4 * MiB}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), unix.BLKDISCARD, uintptr(unsafe.Pointer(&rng)))
		dev.Close()
		if errno == unix.EOPNOTSUPP && b.name == "host-unenforced" {
			t.Skipf("the VM's own filesystem does not punch holes: %v", errno)
		}
		if errno != 0 {
			t.Fatalf("BLKDISCARD on %s: %v", d.Path(), errno)
		}
		after := space(t, m)
		if after.Unallocated != 4*MiB || after.Free-before.Free < 4*MiB-Alignment {
			t.Errorf("after discarding 4 MiB: unallocated %d, free grew by %d; want 4 MiB each", after.Unallocated, after.Free-before.Free)
		}
		// The hole is reserved; at most a block of the filesystem's own
		// metadata (XFS frees one here) comes free with it.
		if after.Available(NoOvercommit) > before.Available(NoOvercommit)+Alignment {
			t.Errorf("available grew from %d to %d after a discard", before.Available(NoOvercommit), after.Available(NoOvercommit))
		}
		if st, err := m.Stat(ctx, "blk"); err != nil || st.Abnormal || st.CapacityBytes != 8*MiB {
			t.Errorf("Stat after a discard = %+v, %v; want 8 MiB, normal", st, err)
		}
	})
}
