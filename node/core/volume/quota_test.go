package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
)

// enforcedBackends are the VM filesystems with project quotas.
func enforcedBackends(t *testing.T) []backend {
	t.Helper()
	ktest.RequireVM(t)
	var bs []backend
	for _, b := range backends(t) {
		if b.enforced {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		t.Fatal("no quota-enforcing filesystem in the VM")
	}
	return bs
}

// TestQuotaIsTheVolumeSize checks on a real kernel that a filesystem volume
// holds exactly its size: writes beyond it fail, Stat reports the quota's
// usage, Expand raises the limit, the inode limit holds, and Delete gives
// the project ID back.
func TestQuotaIsTheVolumeSize(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			v, err := m.Create(ctx, "q", Filesystem, 4*MiB)
			if err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "q")
			if err := asPodUser(t, func() error { return writeFile(t, dir, "a", 3*MiB) }); err != nil {
				t.Fatalf("writing 3 MiB into a 4 MiB volume: %v", err)
			}
			err = asPodUser(t, func() error { return writeFile(t, dir, "b", 2*MiB) })
			if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Fatalf("writing past the volume's size: %v, want ENOSPC or EDQUOT", err)
			}
			st, err := m.Stat(ctx, "q")
			if err != nil {
				t.Fatal(err)
			}
			if !st.UsageKnown || st.CapacityBytes != v.CapacityBytes || st.UsedBytes < 3*MiB || st.UsedBytes > v.CapacityBytes ||
				st.AvailableBytes != st.CapacityBytes-st.UsedBytes || st.Inodes != int64(InodeLimit(v.CapacityBytes)) || st.InodesUsed < 2 || st.Abnormal {
				t.Errorf("Stat = %+v", st)
			}
			// statfs inside the volume (what df in the pod shows) reports
			// the quota as the size on XFS.
			if b.name == "xfs" {
				var sfs unix.Statfs_t
				if err := unix.Statfs(dir, &sfs); err != nil {
					t.Fatal(err)
				}
				if got := int64(sfs.Blocks) * sfs.Bsize; got != v.CapacityBytes {
					t.Errorf("statfs size in the volume = %d, want %d", got, v.CapacityBytes)
				}
			}
			if _, err := m.Expand(ctx, "q", 8*MiB); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(dir, "b"))
			if err := asPodUser(t, func() error { return writeFile(t, dir, "b", 2*MiB) }); err != nil {
				t.Errorf("writing after Expand: %v", err)
			}
			if st, _ := m.Stat(ctx, "q"); st.CapacityBytes != 8*MiB {
				t.Errorf("capacity after Expand = %d", st.CapacityBytes)
			}
			q, err := fsquota.GetQuota(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Delete(ctx, "q"); err != nil {
				t.Fatal(err)
			}
			assertGone(t, m, "q")
			claims, err := m.ProjectIDs.Claimed()
			if err != nil || len(claims) != 0 {
				t.Errorf("claims after Delete = %v, %v; want none (project %d released)", claims, err, q.ProjectID)
			}
		})
	}
}

func TestInodeLimit(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			// A small volume gets MinInodes.
			if _, err := m.Create(ctx, "i", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "i")
			n := 0
			err := asPodUser(t, func() error {
				for ; n < MinInodes+10; n++ {
					f, err := os.Create(filepath.Join(dir, fmt.Sprint(n)))
					if err != nil {
						return err
					}
					f.Close()
				}
				return nil
			})
			// The directory itself is one of the inodes.
			if err == nil || n != MinInodes-1 {
				t.Errorf("created %d files before %v; want to stop at %d", n, err, MinInodes-1)
			}
			if err := m.Delete(ctx, "i"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNoOvercommitOfFilesystemVolumes(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			var st unix.Statfs_t
			if err := unix.Statfs(m.Data.Volumes.FullPath(), &st); err != nil {
				t.Fatal(err)
			}
			free := int64(st.Bavail) * st.Bsize
			half := free / 2 / Alignment * Alignment
			if _, err := m.Create(ctx, "h1", Filesystem, half); err != nil {
				t.Fatal(err)
			}
			// Half the disk is promised to h1 though it holds nothing:
			// a second volume of more than the rest must be refused.
			if _, err := m.Create(ctx, "h2", Filesystem, half+64*MiB); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Create beyond the unpromised space = %v, want ErrNoSpace", err)
			}
			assertGone(t, m, "h2")
			if _, err := m.Expand(ctx, "h1", free+64*MiB); !errors.Is(err, ErrNoSpace) {
				t.Errorf("Expand beyond free space = %v, want ErrNoSpace", err)
			}
			for _, id := range []string{"h1"} {
				if err := m.Delete(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestStatReportsLostQuotaAndStrayClaimsAreReleased(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			if _, err := m.Create(ctx, "lost", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "lost")
			if err := fsquota.ClearQuota(dir); err != nil {
				t.Fatal(err)
			}
			st, err := m.Stat(ctx, "lost")
			if err != nil || !st.Abnormal {
				t.Errorf("Stat of a volume whose quota was removed = %+v, %v; want abnormal", st, err)
			}
			// A quota changed by hand (xfs_quota's bhard only) is
			// abnormal too.
			if _, err := m.Create(ctx, "changed", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			_, dir, _ = m.Locate(ctx, "changed")
			q, err := fsquota.GetQuota(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetQuota(dir, q.ProjectID, fsquota.Limits{Bytes: 64 * MiB, Inodes: q.Limits.Inodes}); err != nil {
				t.Fatal(err)
			}
			if st, err := m.Stat(ctx, "changed"); err != nil || !st.Abnormal || !strings.Contains(st.Message, "changed outside Plinth") {
				t.Errorf("Stat of a volume whose quota was raised by hand = %+v, %v; want abnormal, saying so", st, err)
			}
			// So is a directory moved to another volume's project ID,
			// with that project's (consistent) limits.
			if _, err := m.Create(ctx, "moved", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			_, moved, _ := m.Locate(ctx, "moved")
			if err := fsquota.ClearQuota(moved); err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetQuota(moved, q.ProjectID, fsquota.Limits{Bytes: MiB, Inodes: InodeLimit(MiB)}); err != nil {
				t.Fatal(err)
			}
			if st, err := m.Stat(ctx, "moved"); err != nil || !st.Abnormal || !strings.Contains(st.Message, "volume changed") {
				t.Errorf("Stat of a volume moved to another's project ID = %+v, %v; want abnormal, naming the owner", st, err)
			}
			// Deleting it leaves the other volume's limits alone and
			// releases its own, forsaken, project ID.
			if err := m.Delete(ctx, "moved"); err != nil {
				t.Fatal(err)
			}
			if got, err := fsquota.GetQuota(dir); err != nil || got.ProjectID != q.ProjectID || got.Limits.Bytes != MiB {
				t.Errorf("quota of the volume whose ID a deleted volume carried = %+v, %v; want project %d limited to %d bytes", got, err, q.ProjectID, MiB)
			}
			if pid, held, err := m.ProjectIDs.Lookup("moved"); err != nil || held {
				t.Errorf("deleted volume still holds project ID %d (%v)", pid, err)
			}
			// A claim whose volume is gone (crash between rmdir and
			// release) is released by Recover; live claims stay.
			if _, err := m.Create(ctx, "live", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			pid, err := m.ProjectIDs.Allocate("ghost")
			if err != nil {
				t.Fatal(err)
			}
			recs, err := m.Recover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			claims, _ := m.ProjectIDs.Claimed()
			if _, still := claims[pid]; still {
				t.Errorf("stray claim %d survived Recover (%+v)", pid, recs)
			}
			if _, ok, _ := m.ProjectIDs.Lookup("live"); !ok {
				t.Errorf("Recover released the claim of a live volume")
			}
		})
	}
}

// TestExpandRaisesOnlyItsOwnProject: a volume whose directory a process
// moved to another volume's project ID (chattr -p, as root in the pod)
// grows neither that volume's limit nor its reported size: Expand refuses,
// transiently, saying why, and once the audit has put the ID back the same
// expansion raises the volume's own limit and only that.
func TestExpandRaisesOnlyItsOwnProject(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			for id, size := range map[string]int64{"grows": MiB, "neighbour": 8 * MiB} {
				if _, err := m.Create(ctx, id, Filesystem, size); err != nil {
					t.Fatal(err)
				}
			}
			_, dir, _ := m.Locate(ctx, "grows")
			own, _, _ := m.ProjectIDs.Lookup("grows")
			theirs, _, _ := m.ProjectIDs.Lookup("neighbour")
			if err := fsquota.SetProjectID(dir, theirs, true); err != nil {
				t.Fatal(err)
			}
			neighbourIntact := func(when string) {
				t.Helper()
				q, err := fsquota.ProjectQuota(dir, theirs)
				if err != nil || q.Limits.Bytes != 8*MiB || q.Limits.Inodes != InodeLimit(8*MiB) {
					t.Errorf("%s: the neighbour's quota = %+v, %v; want its own 8 MiB", when, q, err)
				}
			}
			// Smaller than the neighbour: its limit must not be taken as
			// this volume's size (a false "already that large").
			// Larger: its limit must not be raised.
			for _, size := range []int64{4 * MiB, 16 * MiB} {
				v, err := m.Expand(ctx, "grows", size)
				if err == nil || Infeasible(err) || !strings.Contains(err.Error(), "carries project ID") {
					t.Errorf("Expand to %s of a volume moved to another's project = %+v, %v; want a transient refusal saying why", formatBytes(size), v, err)
				}
				neighbourIntact("after Expand to " + formatBytes(size))
			}
			if q, err := fsquota.ProjectQuota(dir, own); err != nil || q.Limits.Bytes != MiB {
				t.Errorf("the volume's own quota after refused expansions = %+v, %v; want 1 MiB", q, err)
			}
			if _, err := m.RestoreProjectIDs(ctx, "grows", nil); err != nil {
				t.Fatal(err)
			}
			v, err := m.Expand(ctx, "grows", 4*MiB)
			if err != nil || v.CapacityBytes != 4*MiB {
				t.Fatalf("Expand after the ID was put back = %+v, %v", v, err)
			}
			if q, err := fsquota.GetQuota(dir); err != nil || q.ProjectID != own || q.Limits.Bytes != 4*MiB {
				t.Errorf("quota after the expansion = %+v, %v; want project %d with 4 MiB", q, err, own)
			}
			if st, err := m.Stat(ctx, "grows"); err != nil || st.Abnormal || st.CapacityBytes != 4*MiB {
				t.Errorf("Stat after the expansion = %+v, %v; want 4 MiB, normal", st, err)
			}
			neighbourIntact("after the expansion")
		})
	}
}

// TestDeleteReleasesTheProjectOfAClearedDirectory: a volume whose
// directory a process took the project ID off (chattr -p 0, as root in the
// pod) still gives back its claimed ID, and that project's limits, when
// it is deleted.
func TestDeleteReleasesTheProjectOfAClearedDirectory(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			if _, err := m.Create(ctx, "cleared", Filesystem, MiB); err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "cleared")
			pid, _, _ := m.ProjectIDs.Lookup("cleared")
			if err := fsquota.SetProjectID(dir, 0, false); err != nil {
				t.Fatal(err)
			}
			if err := m.Delete(ctx, "cleared"); err != nil {
				t.Fatal(err)
			}
			if _, held, err := m.ProjectIDs.Lookup("cleared"); err != nil || held {
				t.Errorf("the deleted volume still holds its project ID %d (%v)", pid, err)
			}
			if q, err := fsquota.ProjectQuota(m.Data.Volumes.FullPath(), pid); err != nil || q.Limits != (fsquota.Limits{}) {
				t.Errorf("project %d of the deleted volume = %+v, %v; want no limits", pid, q, err)
			}
		})
	}
}

// TestFullVolumeGrowsWithItsData: a filesystem volume written until its
// quota refused more keeps every byte when it grows, shows the new size to
// statfs at once (XFS), takes exactly the new room and no more.
func TestFullVolumeGrowsWithItsData(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			if _, err := m.Create(ctx, "full", Filesystem, 4*MiB); err != nil {
				t.Fatal(err)
			}
			_, dir, _ := m.Locate(ctx, "full")
			// A pattern, not zeros, so that any change of the data shows.
			pattern := make([]byte, 8*MiB)
			for i := range pattern {
				pattern[i] = byte(i % 251)
			}
			err := asPodUser(t, func() error { return os.WriteFile(filepath.Join(dir, "a"), pattern, 0o644) })
			if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Fatalf("filling the volume: %v, want ENOSPC or EDQUOT", err)
			}
			before, err := os.ReadFile(filepath.Join(dir, "a"))
			if err != nil || len(before) < 3*MiB || !bytes.Equal(before, pattern[:len(before)]) {
				t.Fatalf("the full volume holds %d bytes (%v), not the pattern written", len(before), err)
			}
			if _, err := m.Expand(ctx, "full", 8*MiB); err != nil {
				t.Fatalf("growing the full volume: %v", err)
			}
			after, err := os.ReadFile(filepath.Join(dir, "a"))
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("data changed by the resize: %d bytes before, %d after (%v)", len(before), len(after), err)
			}
			if b.name == "xfs" {
				var sfs unix.Statfs_t
				if err := unix.Statfs(dir, &sfs); err != nil {
					t.Fatal(err)
				}
				if got := int64(sfs.Blocks) * sfs.Bsize; got != 8*MiB {
					t.Errorf("statfs size after the resize = %d, want %d", got, 8*MiB)
				}
			}
			if err := asPodUser(t, func() error { return writeFile(t, dir, "b", 2*MiB) }); err != nil {
				t.Errorf("writing into the grown room: %v", err)
			}
			err = asPodUser(t, func() error { return writeFile(t, dir, "c", 4*MiB) })
			if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
				t.Errorf("writing past the new size: %v, want ENOSPC or EDQUOT", err)
			}
		})
	}
}

// TestAvailableIsBoundByFreeSpace fills the data filesystem beside a
// volume (as an over-committed neighbour or the node's other data would)
// and checks that Stat's available bytes, which the kubelet reports as
// kubelet_volume_stats_available_bytes, say what the volume can really
// still take, not its quota's room.
func TestAvailableIsBoundByFreeSpace(t *testing.T) {
	ctx := context.Background()
	for _, b := range enforcedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			m := newManagerOn(t, b)
			if _, err := m.Create(ctx, "a", Filesystem, 64*MiB); err != nil {
				t.Fatal(err)
			}
			st, err := m.Stat(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if st.AvailableBytes != st.CapacityBytes-st.UsedBytes {
				t.Fatalf("Stat of an empty volume on a roomy filesystem = %+v, want all of its quota's room available", st)
			}
			var sfs unix.Statfs_t
			if err := unix.Statfs(m.Data.Volumes.FullPath(), &sfs); err != nil {
				t.Fatal(err)
			}
			free := int64(sfs.Bavail) * sfs.Bsize
			filler, err := os.Create(filepath.Join(filepath.Dir(m.Data.Volumes.FullPath()), "filler"))
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove(filler.Name())
			defer filler.Close()
			if err := fallocate(filler, 0, free-16*MiB); err != nil {
				t.Fatal(err)
			}
			st, err = m.Stat(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if st.AvailableBytes <= 0 || st.AvailableBytes > 17*MiB || st.Abnormal {
				t.Errorf("Stat with 16 MiB left on the data filesystem = %+v, want about 16 MiB available", st)
			}
		})
	}
}
