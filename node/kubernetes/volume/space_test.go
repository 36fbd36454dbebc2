package volume

import (
	"context"
	"errors"
	"testing"
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
		if got, want := s.Available(NoOvercommit), (s.Free-s.Promised-CreateOverhead)/Alignment*Alignment; got != want {
			t.Errorf("available = %d, want free less the promised room, %d", got, want)
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
