package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/volumetest"
)

func TestCreateIsIdempotentAndDetectsConflicts(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		for _, mode := range []Mode{Filesystem, Block} {
			id := "vol-" + mode.String()
			v, err := m.Create(ctx, id, mode, 3*MiB+1)
			if err != nil {
				t.Fatalf("Create %v: %v", mode, err)
			}
			want := Info{ID: id, Mode: mode, CapacityBytes: 3*MiB + Alignment}
			if v != want {
				t.Fatalf("Create %v = %+v, want %+v (size rounded up to %d)", mode, v, want, Alignment)
			}
			// The same request again: the same volume, nothing new.
			if v2, err := m.Create(ctx, id, mode, 3*MiB+1); err != nil || v2 != want {
				t.Fatalf("repeated Create = %+v, %v; want %+v, nil", v2, err, want)
			}
			// Another size or mode: ErrExists, volume untouched.
			other := Block
			if mode == Block {
				other = Filesystem
			}
			for _, bad := range []struct {
				mode  Mode
				bytes int64
			}{{mode, 5 * MiB}, {other, 3*MiB + 1}} {
				if _, err := m.Create(ctx, id, bad.mode, bad.bytes); !errors.Is(err, ErrExists) {
					t.Errorf("Create(%v, %d) over %+v = %v, want ErrExists", bad.mode, bad.bytes, want, err)
				}
			}
			st, err := m.Stat(ctx, id)
			if err != nil || st.Info != want {
				t.Fatalf("Stat after conflicts = %+v, %v; want %+v", st.Info, err, want)
			}
			if st.Abnormal {
				t.Errorf("fresh volume is abnormal: %s", st.Message)
			}
			mo, path, err := m.Locate(ctx, id)
			if err != nil || mo != mode {
				t.Fatalf("Locate = %v, %q, %v", mo, path, err)
			}
			if mode == Block {
				size, alloc := allocated(t, path)
				if size != want.CapacityBytes || alloc < size {
					t.Errorf("image size %d allocated %d, want %d fully allocated", size, alloc, want.CapacityBytes)
				}
			} else {
				fi, err := os.Stat(path)
				if err != nil || fi.Mode().Perm() != 0o777 {
					t.Errorf("volume directory mode = %v, %v; want 0777", fi.Mode(), err)
				}
				if b.enforced {
					q, err := fsquota.GetQuota(path)
					if err != nil || q.Limits.Bytes != uint64(want.CapacityBytes) || q.Limits.Inodes != InodeLimit(want.CapacityBytes) {
						t.Errorf("quota = %+v, %v; want %d bytes, %d inodes", q, err, want.CapacityBytes, InodeLimit(want.CapacityBytes))
					}
				}
			}
			if err := m.Delete(ctx, id); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			assertGone(t, m, id)
			if err := m.Delete(ctx, id); err != nil {
				t.Fatalf("second Delete: %v", err)
			}
		}
	})
}

func TestBadInputIsRefusedAndTouchesNothing(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, t.TempDir())
	ids := []string{"", "..", "../x", "a/b", "/abs", "x\x00y", strings.Repeat("a", 200), "UPPER", ".hidden", "-lead", "trail-", "a.img", "a b"}
	for _, id := range ids {
		if _, err := m.Create(ctx, id, Block, MiB); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create(%q) = %v, want ErrInvalid", id, err)
		}
		if err := m.Delete(ctx, id); !errors.Is(err, ErrInvalid) {
			t.Errorf("Delete(%q) = %v, want ErrInvalid", id, err)
		}
		if _, err := m.Expand(ctx, id, MiB); !errors.Is(err, ErrInvalid) {
			t.Errorf("Expand(%q) = %v, want ErrInvalid", id, err)
		}
		if _, err := m.Stat(ctx, id); !errors.Is(err, ErrInvalid) {
			t.Errorf("Stat(%q) = %v, want ErrInvalid", id, err)
		}
	}
	for _, size := range []int64{0, -1, -4096, MaxBytes + 1, 1<<63 - 1} {
		if _, err := m.Create(ctx, "v", Block, size); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create size %d = %v, want ErrInvalid", size, err)
		}
	}
	for _, mode := range []Mode{0, 3, -1} {
		if _, err := m.Create(ctx, "v", mode, MiB); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create mode %d = %v, want ErrInvalid", mode, err)
		}
	}
	if got := entries(t, m.Data.Volumes.FullPath()); len(got) != 0 {
		t.Errorf("volumes/ after bad input: %v, want empty", got)
	}
	if got := entries(t, m.Data.State.Operations.FullPath()); len(got) != 0 {
		t.Errorf("operations/ after bad input: %v, want empty", got)
	}
	if _, err := m.Stat(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat(missing) = %v, want ErrNotFound", err)
	}
	if _, err := m.Expand(ctx, "missing", MiB); !errors.Is(err, ErrNotFound) {
		t.Errorf("Expand(missing) = %v, want ErrNotFound", err)
	}
}

func TestUnenforcedCapacityIsRefusedUnlessAllowed(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, t.TempDir())
	m.QuotaError = fsquota.ErrUnsupported
	m.AllowUnenforced = false
	m.ProjectIDs = nil
	if _, err := m.Create(ctx, "fs", Filesystem, MiB); !errors.Is(err, ErrCapacityNotEnforced) || !strings.Contains(err.Error(), "--allow-unenforced-capacity") {
		t.Fatalf("Create filesystem without quotas = %v, want ErrCapacityNotEnforced naming the flag", err)
	}
	assertGone(t, m, "fs")
	// Block volumes are enforced by their image size: always fine.
	if _, err := m.Create(ctx, "blk", Block, MiB); err != nil {
		t.Fatalf("Create block without quotas: %v", err)
	}
	m.AllowUnenforced = true
	v, err := m.Create(ctx, "fs", Filesystem, MiB)
	if err != nil {
		t.Fatalf("Create filesystem with unenforced capacity allowed: %v", err)
	}
	st, err := m.Stat(ctx, "fs")
	if err != nil || st.CapacityBytes != v.CapacityBytes || st.UsageKnown || st.Abnormal || st.Message == "" || st.AvailableBytes != v.CapacityBytes {
		t.Fatalf("Stat of unenforced volume = %+v, %v; want recorded capacity, unknown usage, a message, normal", st, err)
	}
	// The recorded size is what makes retries idempotent and growth work.
	if _, err := m.Create(ctx, "fs", Filesystem, 2*MiB); !errors.Is(err, ErrExists) {
		t.Errorf("Create with another size = %v, want ErrExists", err)
	}
	if v, err := m.Expand(ctx, "fs", 2*MiB); err != nil || v.CapacityBytes != 2*MiB {
		t.Errorf("Expand = %+v, %v", v, err)
	}
	if st, _ := m.Stat(ctx, "fs"); st.CapacityBytes != 2*MiB {
		t.Errorf("capacity after Expand = %d, want %d", st.CapacityBytes, 2*MiB)
	}
	// Once the operator no longer accepts unenforced capacity, growing
	// is refused as making is, and the recorded size stays.
	m.AllowUnenforced = false
	if _, err := m.Expand(ctx, "fs", 4*MiB); !errors.Is(err, ErrCapacityNotEnforced) || !Infeasible(err) {
		t.Errorf("Expand with unenforced capacity refused = %v, want ErrCapacityNotEnforced", err)
	}
	if st, _ := m.Stat(ctx, "fs"); st.CapacityBytes != 2*MiB {
		t.Errorf("capacity after a refused Expand = %d, want %d", st.CapacityBytes, 2*MiB)
	}
}

func TestFullDiskLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, tmpfsDir(t, 64*MiB))
	if _, err := m.Create(ctx, "big", Block, 128*MiB); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Create of a block volume larger than the disk = %v, want ErrNoSpace", err)
	}
	assertGone(t, m, "big")
	if _, err := m.Create(ctx, "bigfs", Filesystem, 128*MiB); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Create of a filesystem volume larger than the disk = %v, want ErrNoSpace", err)
	}
	assertGone(t, m, "bigfs")
	if got := entries(t, m.Data.Volumes.FullPath()); len(got) != 0 {
		t.Errorf("volumes/ after failed creates: %v", got)
	}

	// A failed expansion keeps the old size and leaves no allocation.
	if _, err := m.Create(ctx, "small", Block, 8*MiB); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Expand(ctx, "small", 100*MiB); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Expand beyond the disk = %v, want ErrNoSpace", err)
	}
	_, img := m.paths("small")
	if size, alloc := allocated(t, img); size != 8*MiB || alloc != 8*MiB {
		t.Errorf("after failed Expand: size %d allocated %d, want both %d", size, alloc, 8*MiB)
	}
	if in, _ := m.readIntent("small"); in != nil {
		t.Errorf("intent record left after failed Expand: %+v", in)
	}
	// The space is really free again: a volume filling the rest fits.
	var st unix.Statfs_t
	if err := unix.Statfs(m.Data.Volumes.FullPath(), &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail)*st.Bsize - 2*MiB
	if _, err := m.Create(ctx, "rest", Block, free/Alignment*Alignment); err != nil {
		t.Errorf("Create of the remaining %d bytes: %v", free, err)
	}
}

func TestTrimFreesBlocksPastEnd(t *testing.T) {
	// What a failed fallocate leaves on XFS: blocks beyond EOF. Made here
	// with FALLOC_FL_KEEP_SIZE, which works on every filesystem.
	forEachBackend(t, func(t *testing.T, b backend) {
		p := filepath.Join(b.dir(t), "img")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := fallocate(f, 0, MiB); err != nil {
			t.Fatal(err)
		}
		if err := fallocateMode(f, unix.FALLOC_FL_KEEP_SIZE, MiB, 16*MiB); err != nil {
			t.Fatal(err)
		}
		if _, alloc := allocated(t, p); alloc < 16*MiB {
			t.Fatalf("setup: only %d bytes allocated", alloc)
		}
		if err := trimFile(f); err != nil {
			t.Fatal(err)
		}
		if size, alloc := allocated(t, p); size != MiB || alloc != MiB {
			t.Errorf("after trim: size %d allocated %d, want both %d", size, alloc, MiB)
		}
	})
}

func TestConcurrentCallsForOneVolume(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				// Half ask for 1 MiB, half for 2 MiB: exactly one size
				// wins and every other call agrees or conflicts.
				size := int64(MiB)
				if i%2 == 1 {
					size = 2 * MiB
				}
				_, errs[i] = m.Create(ctx, "race", Filesystem, size)
			})
		}
		wg.Wait()
		st, err := m.Stat(ctx, "race")
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range errs {
			size := int64(MiB)
			if i%2 == 1 {
				size = 2 * MiB
			}
			switch {
			case size == st.CapacityBytes && err != nil:
				t.Errorf("call %d for the winning size failed: %v", i, err)
			case size != st.CapacityBytes && !errors.Is(err, ErrExists):
				t.Errorf("call %d for the losing size = %v, want ErrExists", i, err)
			}
		}
		// Concurrent deletes and creates of many IDs: one volume's calls
		// take turns, and each is then a plain Create (or a repeat of
		// it) or a plain Delete (or one of a missing volume), so every
		// call succeeds. They leave a consistent tree: every ID either
		// fully there, as created, or fully gone.
		ids := []string{"a", "b", "c", "d"}
		for i := range n {
			wg.Go(func() {
				id := ids[i%4]
				if i%3 == 0 {
					errs[i] = m.Delete(ctx, id)
				} else {
					_, errs[i] = m.Create(ctx, id, Block, MiB)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				op := "Create"
				if i%3 == 0 {
					op = "Delete"
				}
				t.Errorf("concurrent call %d (%s of %s): %v", i, op, ids[i%4], err)
			}
		}
		assertAllSettled(t, m, "after concurrent calls")
		for _, id := range ids {
			st, err := m.Stat(ctx, id)
			switch {
			case errors.Is(err, ErrNotFound):
				assertGone(t, m, id)
			case err != nil:
				t.Errorf("Stat(%s) after concurrent calls: %v", id, err)
			case st.Info != Info{ID: id, Mode: Block, CapacityBytes: MiB} || st.Abnormal:
				t.Errorf("%s after concurrent calls: %+v, want a whole %d-byte block volume", id, st, MiB)
			}
		}
	})
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 4 << 20: "4 MiB", 1536 << 20: "1.5 GiB",
		77521092608: "72.2 GiB", 1 << 50: "1 PiB", MaxBytes: "1 EiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestNewRefusesLinkedDataDirectory: a data tree placed through a symbolic
// link is refused, since its in-use checks would compare its paths with
// the kernel's resolved ones and find nothing in use; placed at the
// resolved path (localstorage.Resolve), the same directory is accepted.
func TestNewRefusesLinkedDataDirectory(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "disk")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "data")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d, qerr := volumetest.DataDir(t, link)
	if _, err := New(Config{Data: d, QuotaError: qerr, AllowUnenforced: true}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("New on a data directory placed through a link = %v, want a refusal naming the link", err)
	}
	resolved, err := localstorage.Resolve(link)
	if err != nil {
		t.Fatal(err)
	}
	d, qerr = volumetest.DataDir(t, resolved)
	if _, err := New(Config{Data: d, QuotaError: qerr, AllowUnenforced: true}); err != nil {
		t.Errorf("New on the resolved path: %v", err)
	}
}
