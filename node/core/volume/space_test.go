package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSpaceAccounting: what Space reports a new volume can get is what
// Create accepts, and volumes count as documented (see space.go): a block
// image by its whole size, a filesystem volume by its whole limit where
// quotas are enforced (and by nothing it has not written where they are
// not), and over-commit lends half of the promised room at ratio 2.
func TestSpaceAccounting(t *testing.T) {
	ctx := context.Background()
	// A tmpfs of its own: nobody else writes there, so free space moves
	// only with the test's volumes and the figures can be exact.
	t.Run("tmpfs-unenforced", func(t *testing.T) {
		m := newManager(t, tmpfsDir(t, 64*MiB))
		// The first volume also writes the data directory's mark (a
		// block of its own, once: dataid.go); written first, it leaves
		// the figures below to the volumes alone.
		if err := m.markUsed(); err != nil {
			t.Fatal(err)
		}
		before := space(t, m)
		if before.Promised != 0 {
			t.Fatalf("promised on an empty node = %d", before.Promised)
		}
		if _, err := m.Create(ctx, "blk", Block, 16*MiB); err != nil {
			t.Fatal(err)
		}
		afterBlock := space(t, m)
		if got := before.Available(NoOvercommit) - afterBlock.Available(NoOvercommit); got != 16*MiB {
			t.Errorf("a 16 MiB block volume took %d bytes of the available space, want %d", got, 16*MiB)
		}
		if _, err := m.Create(ctx, "fs", Filesystem, 16*MiB); err != nil {
			t.Fatal(err)
		}
		if got := space(t, m); got.Available(NoOvercommit) != afterBlock.Available(NoOvercommit) {
			t.Errorf("an empty unenforced filesystem volume changed the available space from %d to %d", afterBlock.Available(NoOvercommit), got.Available(NoOvercommit))
		}
		agree(t, m, NoOvercommit)
	})
	forEachBackend(t, func(t *testing.T, b backend) {
		if !b.enforced {
			return // the host's filesystem is shared: covered by tmpfs above
		}
		m := newManagerOn(t, b)
		if _, err := m.Create(ctx, "fs1", Filesystem, 16*MiB); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Create(ctx, "fs2", Filesystem, 8*MiB); err != nil {
			t.Fatal(err)
		}
		s := space(t, m)
		// The two limits, less the little the empty directories use
		// (ext4 charges a directory's block to its project).
		if s.Promised > 24*MiB || s.Promised < 24*MiB-CreateOverhead {
			t.Errorf("promised = %d, want about the two empty limits, %d", s.Promised, 24*MiB)
		}
		if got, want := s.Available(NoOvercommit), (s.Free-s.Promised-StateReserve-CreateOverhead)/Alignment*Alignment; got != want {
			t.Errorf("available = %d, want free less the promised room and the state reserve, %d", got, want)
		}
		if lent := s.Available(2) - s.Available(NoOvercommit); lent < s.Promised/2-Alignment || lent > s.Promised/2+Alignment {
			t.Errorf("over-commit 2 adds %d bytes, want half the promised room, %d", lent, s.Promised/2)
		}
		agree(t, m, 2)
	})
}

// agree checks that Create accepts exactly Available and refuses a block
// more than Available and Create's own overhead, under ratio r, with a
// block volume (whose size is taken at once, so nothing else moves
// meanwhile).
func agree(t *testing.T, m *Manager, r Overcommit) {
	t.Helper()
	ctx := context.Background()
	n := space(t, m).Available(r)
	{
		big := n + CreateOverhead + Alignment
		if _, err := m.Create(ctx, "too-big", Block, big, WithOvercommit(r)); !errors.Is(err, ErrNoSpace) {
			t.Errorf("Create of available+overhead+4KiB (%d) = %v, want ErrNoSpace", big, err)
		}
	}
	assertGone(t, m, "too-big")
	if _, err := m.Create(ctx, "exact", Block, n, WithOvercommit(r)); err != nil {
		t.Errorf("Create of exactly the available %d bytes: %v", n, err)
	}
}

func space(t *testing.T, m *Manager) Space {
	t.Helper()
	s, err := m.Space(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseOvercommit(t *testing.T) {
	for in, want := range map[string]Overcommit{"1": 1, "1.5": 1.5, "100": 100} {
		if got, err := ParseOvercommit(in); err != nil || got != want {
			t.Errorf("ParseOvercommit(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0.5", "0", "-2", "NaN", "101", "Inf", "2x"} {
		if _, err := ParseOvercommit(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseOvercommit(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

// TestDiscardedBlocksStayTheVolumes: holes punched in a block image (what
// the loop driver does with a pod's discard: mkfs, fstrim) free space on
// the data filesystem that new volumes still may not take, and the volume
// stays normal while that space is there to fill them again; once other
// data has taken it, Stat says the volume's writes may fail.
func TestDiscardedBlocksStayTheVolumes(t *testing.T) {
	ctx := context.Background()
	dir := tmpfsDir(t, 64*MiB)
	m := newManager(t, dir)
	if _, err := m.Create(ctx, "blk", Block, 16*MiB); err != nil {
		t.Fatal(err)
	}
	before := space(t, m)
	if before.Unallocated != 0 {
		t.Fatalf("unallocated of a fresh image = %d, want 0", before.Unallocated)
	}
	_, img := m.paths("blk")
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4*MiB, 8*MiB)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	after := space(t, m)
	if after.Free-before.Free != 8*MiB || after.Unallocated != 8*MiB {
		t.Errorf("after punching 8 MiB: free grew by %d, unallocated %d; want both 8 MiB", after.Free-before.Free, after.Unallocated)
	}
	if after.Available(NoOvercommit) != before.Available(NoOvercommit) || after.Available(4) != before.Available(4) {
		t.Errorf("available after punching 8 MiB = %d (over-commit 4: %d), want unchanged %d (%d)",
			after.Available(NoOvercommit), after.Available(4), before.Available(NoOvercommit), before.Available(4))
	}
	agree(t, m, 4)
	if st, err := m.Stat(ctx, "blk"); err != nil || st.Abnormal || st.CapacityBytes != 16*MiB {
		t.Errorf("Stat of an image with holes the free space can fill = %+v, %v; want 16 MiB, normal", st, err)
	}
	// Something outside the accounting (here a file beside the volumes)
	// takes the free space.
	left := space(t, m).Free
	if left < 8*MiB {
		t.Fatalf("only %d bytes free after reserving the 8 MiB of holes", left)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), make([]byte, left-4*MiB), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Stat(ctx, "blk"); err != nil || !st.Abnormal || !strings.Contains(st.Message, "not allocated") {
		t.Errorf("Stat of an image with 8 MiB of holes and 4 MiB free = %+v, %v; want abnormal, saying why", st, err)
	}
}
