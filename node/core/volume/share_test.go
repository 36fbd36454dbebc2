package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/volumetest"
)

// shareVolumeSize is the volume whose promised room the share's writers
// must leave alone; shareWrite is what the test writes into it: all of
// it but the block that ext4 charges the volume's directory itself.
const (
	shareVolumeSize = 32 * MiB
	shareWrite      = shareVolumeSize - 64<<10
)

// newShareManager returns a Manager whose data tree and node share (the
// directories "kubelet" and "containerd") lie side by side on the
// backend's filesystem, as a booted node's /data/volumes and
// /data/kubelet do. With dirs false it has no share. A file written into
// "containerd" before the share is set up stands for the images a node
// has when it boots.
func newShareManager(t *testing.T, b backend, dirs bool, reserve int64) (m *Manager, kubelet string) {
	t.Helper()
	base := b.dir(t)
	kubelet, containerd := filepath.Join(base, "kubelet"), filepath.Join(base, "containerd")
	for _, d := range []string{kubelet, containerd} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeFile(t, containerd, "image", MiB); err != nil {
		t.Fatal(err)
	}
	data, qerr := volumetest.DataDir(t, filepath.Join(base, "data"))
	cfg := Config{Data: data, QuotaError: qerr, AllowUnenforced: qerr != nil}
	if dirs {
		cfg.Share = NodeShare{Dirs: []string{kubelet, containerd}, Reserve: reserve}
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, kubelet
}

// fill allocates 1 MiB after 1 MiB to a new file in dir, as a pod would,
// until the filesystem or a quota refuses, and returns how much it got.
func fill(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	err = asPodUser(t, func() error {
		for ; ; n += MiB {
			if err := fallocate(f, n, MiB); err != nil {
				return err
			}
		}
	})
	if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("filling %s: %v after %d MiB, want ENOSPC or EDQUOT", dir, err, n/MiB)
	}
	return n
}

// TestShareKeepsAVolumesPromisedRoom is issue 37's "filling the node" on
// the engine: the node's other writers (an emptyDir below the kubelet's
// root) fill everything they can, and a filesystem volume can still be
// written to its size. Without a share the same fill takes the volume's
// room (the kept negative control). The share's limit follows the
// promise: Create lowers it, Delete raises it.
func TestShareKeepsAVolumesPromisedRoom(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name+"/without-share", func(t *testing.T) {
			m, kubelet := newShareManager(t, b, false, 0)
			v, err := m.Create(ctx, "v", Filesystem, shareVolumeSize)
			if err != nil {
				t.Fatal(err)
			}
			fill(t, kubelet)
			_, dir, _ := m.Locate(ctx, v.ID)
			err = asPodUser(t, func() error { return writeFile(t, dir, "data", shareWrite) })
			if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Fatalf("without a share, writing %d bytes into a %d-byte volume after the node's emptyDirs filled the disk: %v; want ENOSPC (else this test proves nothing)", shareWrite, shareVolumeSize, err)
			}
		})
		t.Run(b.name, func(t *testing.T) {
			m, kubelet := newShareManager(t, b, true, 8*MiB)
			setup, err := m.SetUpShare(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("share: %+v", setup)
			if !setup.Active || setup.Restored.Strays < 2 || setup.Restored.StrayBytes < MiB || setup.Limit < setup.Reserve {
				t.Fatalf("SetUpShare = %+v, want an active share that took the directories and the image into its project", setup)
			}
			before := shareLimit(t, m)
			// Between Create's check for room and the volume's quota,
			// the share must already be kept out of that room.
			var during int64
			m.crashHook = func(point string) {
				if point == "create:mkdir" {
					during = shareLimit(t, m)
				}
			}
			v, err := m.Create(ctx, "v", Filesystem, shareVolumeSize)
			m.crashHook = nil
			if err != nil {
				t.Fatal(err)
			}
			if during == 0 || during > before-shareVolumeSize {
				t.Errorf("share limit %d before Create, %d while it made the volume; want it lowered by the %d bytes before the check", before, during, shareVolumeSize)
			}
			if after := shareLimit(t, m); after > before-shareVolumeSize || after < before-shareVolumeSize-MiB {
				t.Errorf("share limit %d before creating a %d-byte volume, %d after; want it lowered by the volume", before, shareVolumeSize, after)
			}
			got := fill(t, kubelet)
			sp := space(t, m)
			t.Logf("the share's writers got %d MiB; then %+v", got/MiB, sp)
			_, dir, _ := m.Locate(ctx, v.ID)
			if err := asPodUser(t, func() error { return writeFile(t, dir, "data", shareWrite) }); err != nil {
				t.Fatalf("with the share full, writing %d bytes into a %d-byte volume: %v", shareWrite, shareVolumeSize, err)
			}
			if _, err := m.Create(ctx, "w", Filesystem, 4*MiB); !errors.Is(err, ErrNoSpace) {
				t.Errorf("creating a volume while the share holds all the room volumes were not promised: %v, want ErrNoSpace", err)
			}
			if err := os.Remove(filepath.Join(kubelet, "fill")); err != nil {
				t.Fatal(err)
			}
			full := shareLimit(t, m)
			if err := m.Delete(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
			if after := shareLimit(t, m); after < full+shareWrite {
				t.Errorf("share limit %d before deleting the volume, %d after; want it raised by at least the %d bytes the volume held", full, after, shareWrite)
			}
		})
	}
}

// TestShareReserveIsNeverPromised gives the share a reserve of most of the
// free space and checks that volumes get only the rest: Available leaves
// the reserve's unused part out, a volume larger than what remains is
// refused with a message naming the reserve, and a volume taking all that
// remains leaves the share its reserve as its limit.
func TestShareReserveIsNeverPromised(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			probe, _ := newShareManager(t, b, false, 0)
			reserve := space(t, probe).Free / 2 / Alignment * Alignment
			m, _ := newShareManager(t, b, true, reserve)
			if _, err := m.SetUpShare(ctx); err != nil {
				t.Fatal(err)
			}
			sp := space(t, m)
			if sp.ShareUsed < MiB || sp.ShareReserve != reserve-sp.ShareUsed {
				t.Fatalf("Space = %+v, want the share's usage (at least the 1 MiB image) and its reserve of %d less that", sp, reserve)
			}
			avail := sp.Available(NoOvercommit)
			if want := sp.Free - sp.Promised - sp.Unallocated - sp.ShareReserve - StateReserve - CreateOverhead; avail > want || avail < want-Alignment {
				t.Errorf("Available = %d, want %d (the free space less the share's unused reserve)", avail, want)
			}
			_, err := m.Create(ctx, "big", Filesystem, avail+4*MiB)
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "reserve") {
				t.Errorf("creating a volume larger than what the reserve leaves: %v, want ErrNoSpace naming the reserve", err)
			}
			if _, err := m.Create(ctx, "all", Filesystem, avail); err != nil {
				t.Fatal(err)
			}
			if got := shareLimit(t, m); got < reserve || got > reserve+CreateOverhead+Alignment {
				t.Errorf("share limit with volumes promised all but the reserve = %d, want the reserve %d", got, reserve)
			}
		})
	}
}

// shareLimit reads the share's limit from the kernel.
func shareLimit(t *testing.T, m *Manager) int64 {
	t.Helper()
	q, err := fsquota.ProjectQuota(m.Data.Volumes.FullPath(), ShareProjectID)
	if err != nil {
		t.Fatal(err)
	}
	if q.Limits.Bytes == 0 {
		t.Fatal("the share has no limit")
	}
	return int64(q.Limits.Bytes)
}

// TestShareRefusesDirectoriesItMustNotTake checks SetUpShare's refusals: a
// directory overlapping the volumes (its relabelling would move volumes'
// files into the share) or not absolute fails with ErrInvalid; one on
// another filesystem takes nothing from the data filesystem and is left
// out. Where quotas are not enforced the share does nothing and says why.
func TestShareRefusesDirectoriesItMustNotTake(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, b backend) {
		base := b.dir(t)
		data, qerr := volumetest.DataDir(t, filepath.Join(base, "data"))
		other := tmpfsDir(t, MiB)
		for _, c := range []struct {
			dirs    []string
			invalid bool
		}{
			{[]string{data.FullPath()}, true},
			{[]string{filepath.Join(data.Volumes.FullPath(), "x")}, true},
			{[]string{"relative"}, true},
			{[]string{other}, false},
		} {
			m, err := New(Config{Data: data, QuotaError: qerr, AllowUnenforced: qerr != nil, Share: NodeShare{Dirs: c.dirs}})
			if err != nil {
				t.Fatal(err)
			}
			setup, err := m.SetUpShare(ctx)
			switch {
			case !b.enforced || !c.invalid:
				if err != nil || setup.Active || m.ShareActive() || setup.Reason == nil {
					t.Errorf("SetUpShare(%v) = %+v, %v; want no share and a reason", c.dirs, setup, err)
				}
			case !errors.Is(err, ErrInvalid) || m.ShareActive():
				t.Errorf("SetUpShare(%v) = %+v, %v; want ErrInvalid and no share", c.dirs, setup, err)
			}
		}
	})
}

// TestShareAuditPutsEscapedFilesBack plays a pod that moves a directory
// of its emptyDir out of the share's project and writes there, beyond the
// share's limit; RestoreShare must put it back, so that it counts in the
// share's usage again.
func TestShareAuditPutsEscapedFilesBack(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m, kubelet := newShareManager(t, b, true, 8*MiB)
			if _, err := m.SetUpShare(ctx); err != nil {
				t.Fatal(err)
			}
			escape := filepath.Join(kubelet, "pods", "escape")
			if err := os.MkdirAll(escape, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetProjectID(escape, 0, false); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(t, escape, "out", 4*MiB); err != nil {
				t.Fatal(err)
			}
			before := space(t, m).ShareUsed
			r, err := m.RestoreShare(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			after := space(t, m).ShareUsed
			if r.Strays != 2 || r.StrayBytes < 4*MiB || after < before+4*MiB {
				t.Errorf("RestoreShare = %+v, share usage %d before, %d after; want the escaped directory and its 4 MiB back in the share", r, before, after)
			}
			if id, inherit, err := fsquota.ProjectID(escape); err != nil || id != ShareProjectID || !inherit {
				t.Errorf("the escaped directory after the audit: project %d, inherit %v, %v; want %d with PROJINHERIT", id, inherit, err, ShareProjectID)
			}
		})
	}
}

// TestShareLeavesDiscardedBlocksTheirRoom is the block half of "filling
// the node": a pod discards half of its block volume (the loop driver
// punches holes in the image), the node's other writers fill everything
// they can, and the pod's writes into the discarded half must still find
// room. Without a share the same fill makes them fail (kept negative
// control).
func TestShareLeavesDiscardedBlocksTheirRoom(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		for _, withShare := range []bool{false, true} {
			name := b.name
			if !withShare {
				name += "/without-share"
			}
			t.Run(name, func(t *testing.T) {
				m, kubelet := newShareManager(t, b, withShare, 8*MiB)
				if _, err := m.SetUpShare(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := m.Create(ctx, "blk", Block, shareVolumeSize); err != nil {
					t.Fatal(err)
				}
				_, img := m.paths("blk")
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				const half = shareVolumeSize / 2
				if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, half); err != nil {
					t.Fatal(err)
				}
				fill(t, kubelet)
				err = asPodUser(t, func() error {
					if _, err := f.WriteAt(make([]byte, half), 0); err != nil {
						return err
					}
					return f.Sync()
				})
				switch {
				case withShare && err != nil:
					t.Errorf("with the share full, writing the %d discarded bytes of a block volume again: %v", half, err)
				case !withShare && !errors.Is(err, unix.ENOSPC):
					t.Errorf("without a share, writing the discarded half of a block volume after the node's emptyDirs filled the disk: %v; want ENOSPC (else this test proves nothing)", err)
				}
			})
		}
	}
}
