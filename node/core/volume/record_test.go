package volume

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
)

func TestParseReclaimPolicy(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    ReclaimPolicy
		wantErr bool
	}{
		{in: "delete", want: ReclaimDelete},
		{in: "retain", want: ReclaimRetain},
		{in: "", wantErr: true},
		{in: "Delete", wantErr: true},
		{in: "recycle", wantErr: true},
	} {
		got, err := ParseReclaimPolicy(tc.in)
		if tc.wantErr {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseReclaimPolicy(%q) = %q, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseReclaimPolicy(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// inode returns the inode number of the file at p, so a test can tell
// whether an atomic write (which renames a new file into place) happened.
func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestReclaimPolicyRecord: the record is written only for a complete
// volume, read back, rewritten only when it changes, refuses bad input,
// never reads an unreadable record as "unrecorded", and goes away with
// the volume.
func TestReclaimPolicyRecord(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		for _, mode := range []Mode{Filesystem, Block} {
			id := "rec-" + mode.String()
			if err := m.SetReclaimPolicy(ctx, id, ReclaimRetain); !errors.Is(err, ErrNotFound) {
				t.Fatalf("SetReclaimPolicy of a missing volume = %v, want ErrNotFound", err)
			}
			if rec, err := m.readRecord(id); rec != nil || err != nil {
				t.Fatalf("a record was written for a missing volume: %+v, %v", rec, err)
			}
			if _, err := m.Create(ctx, id, mode, MiB); err != nil {
				t.Fatal(err)
			}
			if p, err := m.ReclaimPolicy(ctx, id); err != nil || p != ReclaimUnrecorded {
				t.Fatalf("new volume: ReclaimPolicy = %q, %v; want unrecorded", p, err)
			}
			if err := m.SetReclaimPolicy(ctx, id, "Recycle"); !errors.Is(err, ErrInvalid) {
				t.Errorf("SetReclaimPolicy(Recycle) = %v, want ErrInvalid", err)
			}
			if err := m.SetReclaimPolicy(ctx, "../x", ReclaimRetain); !errors.Is(err, ErrInvalid) {
				t.Errorf("SetReclaimPolicy(bad ID) = %v, want ErrInvalid", err)
			}
			if _, err := m.ReclaimPolicy(ctx, "../x"); !errors.Is(err, ErrInvalid) {
				t.Errorf("ReclaimPolicy(bad ID) = %v, want ErrInvalid", err)
			}
			for _, p := range []ReclaimPolicy{ReclaimDelete, ReclaimRetain} {
				if err := m.SetReclaimPolicy(ctx, id, p); err != nil {
					t.Fatal(err)
				}
				if got, err := m.ReclaimPolicy(ctx, id); err != nil || got != p {
					t.Fatalf("ReclaimPolicy after setting %q = %q, %v", p, got, err)
				}
			}
			f, err := m.recordFile(id)
			if err != nil {
				t.Fatal(err)
			}
			before := inode(t, f.FullPath())
			if err := m.SetReclaimPolicy(ctx, id, ReclaimRetain); err != nil {
				t.Fatal(err)
			}
			if inode(t, f.FullPath()) != before {
				t.Error("setting the same policy again rewrote the record")
			}

			// Damaged: an error, never "unrecorded" (which would make
			// retained data deletable). Setting a policy repairs it.
			if err := os.WriteFile(f.FullPath(), []byte("{garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			if p, err := m.ReclaimPolicy(ctx, id); err == nil {
				t.Errorf("unreadable record read as %q without error", p)
			}
			if err := os.WriteFile(f.FullPath(), []byte(`{"reclaimPolicy":"recycle"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if p, err := m.ReclaimPolicy(ctx, id); err == nil {
				t.Errorf("record with unknown policy read as %q without error", p)
			}
			if err := m.SetReclaimPolicy(ctx, id, ReclaimRetain); err != nil {
				t.Fatal(err)
			}
			if p, err := m.ReclaimPolicy(ctx, id); err != nil || p != ReclaimRetain {
				t.Errorf("after repair: %q, %v", p, err)
			}

			if err := m.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			assertGone(t, m, id)
			if p, err := m.ReclaimPolicy(ctx, id); err != nil || p != ReclaimUnrecorded {
				t.Errorf("after Delete: ReclaimPolicy = %q, %v; want unrecorded", p, err)
			}
		}

		// A record whose volume an operator removed by hand does not carry
		// over to a new volume of the same ID.
		id := "rec-stale"
		if _, err := m.Create(ctx, id, Block, MiB); err != nil {
			t.Fatal(err)
		}
		if err := m.SetReclaimPolicy(ctx, id, ReclaimRetain); err != nil {
			t.Fatal(err)
		}
		_, img := m.paths(id)
		if err := os.Remove(img); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Create(ctx, id, Block, MiB); err != nil {
			t.Fatal(err)
		}
		if p, err := m.ReclaimPolicy(ctx, id); err != nil || p != ReclaimUnrecorded {
			t.Errorf("new volume over a stale record: ReclaimPolicy = %q, %v; want unrecorded", p, err)
		}
		if err := m.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
}
