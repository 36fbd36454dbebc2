package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

// reflinkBackends returns the data filesystems that make copy-on-write
// copies: on the host a loop-mounted XFS (quotas not enforced: the host
// kernel has no XFS quota support), in the VM the XFS disk with project
// quotas enforced.
func reflinkBackends(t *testing.T) []backend {
	t.Helper()
	ktest.RequireRoot(t)
	dir := func(t *testing.T) string { return volumetest.ReflinkXFS(t) }
	if ktest.InVM() {
		return []backend{{name: "xfs", enforced: true, dir: dir}}
	}
	return []backend{{name: "host-xfs", dir: dir}}
}

func forEachReflinkBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range reflinkBackends(t) {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// pattern is n bytes that differ with seed and position.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/4096) ^ seed
	}
	return b
}

// writeImage writes data at the start of volume id's image, as a pod
// writing to the device would, and syncs it.
func writeImage(t *testing.T, m *Manager, id string, data []byte) {
	t.Helper()
	_, img, err := m.Locate(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readImage(t *testing.T, m *Manager, id string) []byte {
	t.Helper()
	_, img, err := m.Locate(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// usedBytes is what the data filesystem has in use, after a syncfs.
func usedBytes(t testing.TB, m *Manager) int64 {
	t.Helper()
	if err := fsquota.Sync(m.Data.Volumes.FullPath()); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.Data.Volumes.FullPath(), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestCopiesNeedReflink: on a data filesystem without reflink (the host's
// ext4 or tmpfs, the VM's ext4), volumes work as always, and snapshots
// and clones are refused with ErrCopyUnsupported, an infeasible error
// that says what the filesystem lacks.
func TestCopiesNeedReflink(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		switch err := m.CopyOnWriteError(); {
		case b.name == "xfs" && err != nil:
			t.Fatalf("the VM's XFS (reflink=1) is probed as unable to clone: %v", err)
		case err == nil:
			// The VM's XFS, or a development host whose
			// temporary directory clones (XFS, btrfs): the other
			// tests are about such filesystems.
			return
		}
		if _, err := m.Create(ctx, "vol", Block, MiB); err != nil {
			t.Fatalf("a node without reflink must keep making volumes: %v", err)
		}
		_, err := m.CreateSnapshot(ctx, "vol", "snap")
		if !errors.Is(err, ErrCopyUnsupported) || !Infeasible(err) {
			t.Errorf("CreateSnapshot without reflink = %v, want infeasible ErrCopyUnsupported", err)
		}
		if _, err := m.Create(ctx, "clone", Block, MiB, FromVolume("vol")); !errors.Is(err, ErrCopyUnsupported) {
			t.Errorf("Create FromVolume without reflink = %v, want ErrCopyUnsupported", err)
		}
		if ents := entries(t, m.Data.Snapshots.FullPath()); len(ents) != 0 {
			t.Errorf("refused snapshot left %v", ents)
		}
		assertGone(t, m, "clone")
	})
}

// TestBlockSnapshotAndRestore: a block volume's snapshot is the image at
// that instant, takes no data blocks, and restores into a volume that
// reads the same bytes and takes none either until written; a larger
// restore is grown, a smaller one or one of another mode refused.
func TestBlockSnapshotAndRestore(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		if err := m.CopyOnWriteError(); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		const size = 64 * MiB
		if _, err := m.Create(ctx, "src", Block, size); err != nil {
			t.Fatal(err)
		}
		before := pattern(1, size)
		writeImage(t, m, "src", before)
		used := usedBytes(t, m)
		snap, err := m.CreateSnapshot(ctx, "src", "snap")
		if err != nil {
			t.Fatal(err)
		}
		if snap.ID != "snap" || snap.SourceVolumeID != "src" || snap.Mode != Block || snap.SizeBytes != size ||
			snap.ReservedBytes != size || !snap.ReadyToUse || snap.CreatedAt.IsZero() {
			t.Errorf("CreateSnapshot = %+v", snap)
		}
		if grew := usedBytes(t, m) - used; grew > MiB {
			t.Errorf("the snapshot of a %d-byte volume took %d bytes of the data filesystem, want under 1 MiB", size, grew)
		}
		// Idempotent; the same ID for another volume is refused.
		if again, err := m.CreateSnapshot(ctx, "src", "snap"); err != nil || again != snap {
			t.Errorf("CreateSnapshot again = %+v, %v; want %+v", again, err, snap)
		}
		if _, err := m.Create(ctx, "other", Block, MiB); err != nil {
			t.Fatal(err)
		}
		if _, err := m.CreateSnapshot(ctx, "other", "snap"); !errors.Is(err, ErrExists) {
			t.Errorf("CreateSnapshot of another volume under the same ID = %v, want ErrExists", err)
		}
		writeImage(t, m, "src", pattern(2, size))

		used = usedBytes(t, m)
		if _, err := m.Create(ctx, "restored", Block, size, FromSnapshot("snap")); err != nil {
			t.Fatal(err)
		}
		if grew := usedBytes(t, m) - used; grew > MiB {
			t.Errorf("restoring took %d bytes of the data filesystem, want under 1 MiB", grew)
		}
		if !bytes.Equal(readImage(t, m, "restored"), before) {
			t.Error("the restored volume does not read as the source did when the snapshot was taken")
		}
		if v, err := m.Create(ctx, "restored", Block, size, FromSnapshot("snap")); err != nil || v.CapacityBytes != size {
			t.Errorf("Create FromSnapshot again = %+v, %v; want the volume", v, err)
		}
		if _, err := m.Create(ctx, "restored", Block, size, FromVolume("src")); !errors.Is(err, ErrExists) {
			t.Errorf("Create of the restored volume from another source = %v, want ErrExists", err)
		}

		// Larger: grown after the copy, the new part allocated and zero.
		big, err := m.Create(ctx, "bigger", Block, 2*size, FromSnapshot("snap"))
		if err != nil || big.CapacityBytes != 2*size {
			t.Fatalf("restoring into a larger volume = %+v, %v", big, err)
		}
		got := readImage(t, m, "bigger")
		if !bytes.Equal(got[:size], before) || !bytes.Equal(got[size:], make([]byte, size)) {
			t.Error("the larger restored volume does not read as the snapshot followed by zeros")
		}
		_, img, _ := m.Locate(ctx, "bigger")
		if sz, alloc := allocated(t, img); alloc < sz {
			t.Errorf("larger restored image: %d of %d bytes allocated, want all", alloc, sz)
		}
		for _, bad := range []struct {
			mode  Mode
			bytes int64
		}{{Block, size / 2}, {Filesystem, size}} {
			_, err := m.Create(ctx, "bad", bad.mode, bad.bytes, FromSnapshot("snap"))
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrSmallerThanSource) != (bad.mode == Block) {
				t.Errorf("restoring into a %v volume of %d bytes = %v, want ErrInvalid (and ErrSmallerThanSource if smaller)", bad.mode, bad.bytes, err)
			}
			assertGone(t, m, "bad")
		}
		if _, err := m.Create(ctx, "nosnap", Block, size, FromSnapshot("missing")); !errors.Is(err, ErrNotFound) {
			t.Errorf("restoring a missing snapshot = %v, want ErrNotFound", err)
		}
		assertGone(t, m, "nosnap")

		// Deleting the snapshot leaves its restored volumes whole.
		if err := m.DeleteSnapshot(ctx, "snap"); err != nil {
			t.Fatal(err)
		}
		if err := m.DeleteSnapshot(ctx, "snap"); err != nil {
			t.Errorf("deleting a deleted snapshot = %v, want success", err)
		}
		if _, err := m.GetSnapshot(ctx, "snap"); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetSnapshot after deletion = %v, want ErrNotFound", err)
		}
		if !bytes.Equal(readImage(t, m, "restored"), before) {
			t.Error("deleting the snapshot changed the restored volume")
		}
		if ents := entries(t, m.Data.Snapshots.FullPath()); len(ents) != 0 {
			t.Errorf("deleted snapshot left %v", ents)
		}
	})
}

// TestFilesystemSnapshotAndRestore: a filesystem volume's snapshot keeps
// its tree (modes, owners, times, xattrs, symbolic links, hard links, a
// sparse file), and a volume restored from it is that tree, with its own
// project ID and quota where quotas are enforced.
func TestFilesystemSnapshotAndRestore(t *testing.T) {
	ctx := context.Background()
	forEachReflinkBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		const size = 64 * MiB
		if _, err := m.Create(ctx, "src", Filesystem, size); err != nil {
			t.Fatal(err)
		}
		_, dir, _ := m.Locate(ctx, "src")
		volumetest.SampleTree(t, dir)
		if err := os.Chmod(dir, 0o2770); err != nil { // as the kubelet's fsGroup does
			t.Fatal(err)
		}
		want := volumetest.DescribeTree(t, dir)
		snap, err := m.CreateSnapshot(ctx, "src", "snap")
		if err != nil {
			t.Fatal(err)
		}
		if snap.Mode != Filesystem || snap.SizeBytes != size || !snap.ReadyToUse {
			t.Errorf("CreateSnapshot = %+v", snap)
		}
		// Changes after the snapshot are not in it.
		if err := os.WriteFile(dir+"/a/b/data", []byte("changed"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(dir + "/hard1"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Create(ctx, "restored", Filesystem, 2*size, FromSnapshot("snap")); err != nil {
			t.Fatal(err)
		}
		_, rdir, _ := m.Locate(ctx, "restored")
		if diffs := volumetest.DiffTrees(want, volumetest.DescribeTree(t, rdir)); len(diffs) > 0 {
			t.Errorf("the restored volume differs from the source at the snapshot:\n%v", diffs)
		}
		st, err := m.Stat(ctx, "restored")
		if err != nil || st.CapacityBytes != 2*size || st.Abnormal {
			t.Errorf("Stat of the restored volume = %+v, %v; want %d bytes, normal", st, err, 2*size)
		}
		if b.enforced {
			src, _ := fsquota.GetQuota(dir)
			q, err := fsquota.GetQuota(rdir)
			if err != nil || q.ProjectID == src.ProjectID || q.Limits.Bytes != 2*size {
				t.Errorf("restored volume's quota = %+v, %v; want its own project (not %d) limited to %d", q, err, src.ProjectID, 2*size)
			}
		}
		// A clone of the changed source has the change.
		if _, err := m.Create(ctx, "clone", Filesystem, size, FromVolume("src")); err != nil {
			t.Fatal(err)
		}
		_, cdir, _ := m.Locate(ctx, "clone")
		if diffs := volumetest.DiffTrees(volumetest.DescribeTree(t, dir), volumetest.DescribeTree(t, cdir)); len(diffs) > 0 {
			t.Errorf("the clone differs from its source:\n%v", diffs)
		}
		for _, id := range []string{"src", "restored", "clone"} {
			if err := m.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			assertGone(t, m, id)
		}
		if err := m.DeleteSnapshot(ctx, "snap"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRestoredFilesystemVolumeQuotaHolds: XFS charges the blocks a
// restored file shares with its snapshot to the restored volume's project
// in full, so the volume's size limit holds from the first write: it
// takes what is left of its size and fails (ENOSPC) beyond.
func TestRestoredFilesystemVolumeQuotaHolds(t *testing.T) {
	ktest.RequireVM(t)
	ctx := context.Background()
	for _, b := range reflinkBackends(t) {
		if !b.enforced {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			const size = 16 * MiB
			if _, err := m.Create(ctx, "src", Filesystem, size); err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "src")
			if err := writeFile(t, dir, "ten", 10*MiB); err != nil {
				t.Fatal(err)
			}
			if _, err := m.CreateSnapshot(ctx, "src", "snap"); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Create(ctx, "restored", Filesystem, size, FromSnapshot("snap")); err != nil {
				t.Fatal(err)
			}
			_, rdir, _ := m.Locate(ctx, "restored")
			q, err := fsquota.GetQuota(rdir)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("restored volume: quota used %d bytes (the copied file holds %d, shared)", q.UsedBytes, 10*MiB)
			if q.UsedBytes < 10*MiB {
				t.Errorf("the restored volume's quota counts %d bytes, less than the %d its shared file holds", q.UsedBytes, 10*MiB)
			}
			// 6 MiB are left; 5 fit, 2 more do not.
			err = asPodUser(t, func() error { return writeFile(t, rdir, "five", 5*MiB) })
			if err != nil {
				t.Fatalf("writing within the restored volume's size: %v", err)
			}
			err = asPodUser(t, func() error { return writeFile(t, rdir, "two", 2*MiB) })
			if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Errorf("writing past the restored volume's size = %v, want ENOSPC or EDQUOT", err)
			}
			// Overwriting a shared file in place is copy on write:
			// the new blocks are charged before the old ones leave
			// the project, so it needs that much room in the
			// volume's size, which 1 MiB free is not.
			if err := os.Remove(rdir + "/two"); err != nil {
				t.Fatal(err)
			}
			overwrite := func() error {
				return asPodUser(t, func() error {
					f, err := os.OpenFile(rdir+"/ten", os.O_WRONLY, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					if _, err := f.WriteAt(pattern(7, 4*MiB), 0); err != nil {
						return err
					}
					return f.Sync()
				})
			}
			if err := overwrite(); !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Errorf("overwriting 4 MiB of the shared file with 1 MiB of the volume free = %v, want ENOSPC (copy on write needs room)", err)
			}
			// With room for the rewrite it succeeds, and the old
			// blocks leave the project: usage stays the file's.
			if err := os.Remove(rdir + "/five"); err != nil {
				t.Fatal(err)
			}
			if err := overwrite(); err != nil {
				t.Fatalf("overwriting 4 MiB of the shared file with 6 MiB of the volume free: %v", err)
			}
			if q, err := fsquota.GetQuota(rdir); err != nil || q.UsedBytes > 11*MiB {
				t.Errorf("after rewriting 4 MiB of a 10 MiB shared file the volume counts %+v, %v; want about 10 MiB", q, err)
			}
		})
	}
}
