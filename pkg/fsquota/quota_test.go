package fsquota_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
)

const MiB = 1 << 20

// nextID hands each test its own project ID, so usage never leaks between
// tests sharing a disk.
var nextID atomic.Uint32

func init() { nextID.Store(1000) }

// quotaFS are the filesystems quotas must work on, with the error each
// reports over a project's hard limit: XFS says ENOSPC (a full volume),
// ext4 the generic EDQUOT.
var quotaFS = []struct {
	disk    string
	overErr error
}{
	{"xfs", unix.ENOSPC},
	{"ext4", unix.EDQUOT},
}

// volume makes an empty directory with a fresh project ID and limits.
func volume(t *testing.T, disk string, l fsquota.Limits) (string, uint32) {
	t.Helper()
	dir := filepath.Join(ktest.TempDir(t, disk), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	id := nextID.Add(1)
	if err := fsquota.SetQuota(dir, id, l); err != nil {
		t.Fatalf("SetQuota: %v", err)
	}
	return dir, id
}

func getQuota(t *testing.T, dir string) *fsquota.Quota {
	t.Helper()
	q, err := fsquota.GetQuota(dir)
	if err != nil {
		t.Fatalf("GetQuota: %v", err)
	}
	return q
}

// writeFile writes n bytes to a new file and syncs it, returning the first
// error: the quota may bite in write or, with delayed allocation, in fsync.
// It writes like a volume's user would, without CAP_SYS_RESOURCE.
func writeFile(path string, n int) error {
	return withoutSysResource(func() error { return writeFileAsIs(path, n) })
}

func writeFileAsIs(path string, n int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for n > 0 {
		c := min(n, len(buf))
		if _, err := f.Write(buf[:c]); err != nil {
			f.Close()
			return err
		}
		n -= c
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestQuotaEnforcedAtExactlyTheLimit(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			const limit = 8 * MiB
			dir, id := volume(t, fs.disk, fsquota.Limits{Bytes: limit})

			q := getQuota(t, dir)
			if q.ProjectID != id || q.Limits.Bytes != limit {
				t.Fatalf("GetQuota = %+v, want ID %d and %d bytes", q, id, limit)
			}
			// The directory itself may already occupy a block (ext4).
			free := int(limit - q.UsedBytes)
			t.Logf("empty volume uses %d bytes, %d inodes", q.UsedBytes, q.UsedInodes)

			if err := writeFile(filepath.Join(dir, "fill"), free); err != nil {
				t.Fatalf("writing exactly up to the limit (%d bytes): %v", free, err)
			}
			q = getQuota(t, dir)
			if q.UsedBytes != limit {
				t.Errorf("usage after filling = %d, want %d", q.UsedBytes, limit)
			}
			err := writeFile(filepath.Join(dir, "one-more"), 1)
			if !errors.Is(err, fs.overErr) {
				t.Fatalf("writing 1 byte over the limit: %v, want %v", err, fs.overErr)
			}
		})
	}
}

func TestQuotaUsageReadBack(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			dir, _ := volume(t, fs.disk, fsquota.Limits{Bytes: 64 * MiB, Inodes: 100})
			before := getQuota(t, dir)
			if before.Limits.Inodes != 100 {
				t.Errorf("inode limit = %d, want 100", before.Limits.Inodes)
			}
			sub := filepath.Join(dir, "a", "b")
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := writeFile(filepath.Join(sub, fmt.Sprint(i)), MiB); err != nil {
					t.Fatal(err)
				}
			}
			after := getQuota(t, dir)
			// Five new inodes (2 dirs, 3 files); 3 MiB of data plus
			// whatever blocks the two directories take.
			if got := after.UsedInodes - before.UsedInodes; got != 5 {
				t.Errorf("inodes charged = %d, want 5", got)
			}
			if got := after.UsedBytes - before.UsedBytes; got < 3*MiB || got > 3*MiB+2*4096 {
				t.Errorf("bytes charged = %d, want 3 MiB (+ up to 2 directory blocks)", got)
			}
		})
	}
}

func TestQuotaInodeLimit(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			const limit = 10
			dir, _ := volume(t, fs.disk, fsquota.Limits{Inodes: limit})
			used := getQuota(t, dir).UsedInodes // the directory itself
			for i := range limit - used {
				if err := writeFile(filepath.Join(dir, fmt.Sprint(i)), 0); err != nil {
					t.Fatalf("creating file %d of %d allowed: %v", i+1, limit-used, err)
				}
			}
			if err := writeFile(filepath.Join(dir, "over"), 0); !errors.Is(err, fs.overErr) {
				t.Fatalf("creating a file over the inode limit: %v, want %v", err, fs.overErr)
			}
		})
	}
}

func TestStatfsReportsQuotaAsSize(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			dir, id := volume(t, fs.disk, fsquota.Limits{Bytes: 16 * MiB})
			statfsSize := func() (size, free uint64) {
				var st unix.Statfs_t
				if err := unix.Statfs(dir, &st); err != nil {
					t.Fatal(err)
				}
				return st.Blocks * uint64(st.Bsize), st.Bfree * uint64(st.Bsize)
			}
			if size, _ := statfsSize(); size != 16*MiB {
				t.Errorf("statfs size = %d, want the quota %d", size, 16*MiB)
			}
			// Growing the volume is a second SetQuota with the same ID.
			if err := fsquota.SetQuota(dir, id, fsquota.Limits{Bytes: 32 * MiB}); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(filepath.Join(dir, "f"), 20*MiB); err != nil {
				t.Fatalf("writing 20 MiB after growing to 32 MiB: %v", err)
			}
			size, free := statfsSize()
			if size != 32*MiB {
				t.Errorf("statfs size after growing = %d, want %d", size, 32*MiB)
			}
			used := getQuota(t, dir).UsedBytes
			if free != 32*MiB-used {
				t.Errorf("statfs free = %d, want limit - usage = %d", free, 32*MiB-used)
			}
		})
	}
}

func TestClearQuota(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			dir, id := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB})
			if err := fsquota.ClearQuota(dir); err != nil {
				t.Fatalf("ClearQuota: %v", err)
			}
			if _, err := fsquota.GetQuota(dir); !errors.Is(err, fsquota.ErrNoQuota) {
				t.Errorf("GetQuota after ClearQuota: %v, want ErrNoQuota", err)
			}
			if err := fsquota.ClearQuota(dir); err != nil {
				t.Errorf("second ClearQuota: %v", err)
			}
			// The old ID has no limit left: a new directory with it can
			// take more than the old 4 MiB.
			again := filepath.Join(filepath.Dir(dir), "again")
			if err := os.Mkdir(again, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetQuota(again, id, fsquota.Limits{}); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(filepath.Join(again, "f"), 6*MiB); err != nil {
				t.Errorf("writing 6 MiB after clearing a 4 MiB limit: %v", err)
			}
		})
	}
}

func TestSetQuotaRejectsBadInput(t *testing.T) {
	dir, id := volume(t, "xfs", fsquota.Limits{Bytes: MiB})
	err := fsquota.SetQuota(dir, id+1000, fsquota.Limits{Bytes: MiB})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("already has project ID %d", id)) {
		t.Errorf("SetQuota with another ID: %v, want 'already has project ID %d'", err, id)
	}
	if q := getQuota(t, dir); q.ProjectID != id || q.Limits.Bytes != MiB {
		t.Errorf("refused SetQuota changed the quota: %+v", q)
	}
	if err := fsquota.SetQuota(dir, 0, fsquota.Limits{}); err == nil {
		t.Error("SetQuota with ID 0 succeeded")
	}
	if err := fsquota.SetQuota(filepath.Join(dir, "missing"), id, fsquota.Limits{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SetQuota on a missing directory: %v, want ErrNotExist", err)
	}
}

// BenchmarkSetQuota measures assigning a project and limit to a new
// directory, the quota part of provisioning a volume (goal: < 100 µs in the
// VM). Under qemu's TCG emulation even getpid takes µs, so the baseline is
// impl=chmod, one metadata transaction on the same filesystem: SetQuota is
// two transactions (the limit and the project ID) plus open and close.
func BenchmarkSetQuota(b *testing.B) {
	for _, disk := range []string{"xfs", "ext4"} {
		b.Run("fs="+disk+"/impl=fsquota", func(b *testing.B) {
			root := ktest.TempDir(b, disk)
			dirs := make([]string, b.N)
			for i := range dirs {
				dirs[i] = filepath.Join(root, fmt.Sprint(i))
				if err := os.Mkdir(dirs[i], 0o755); err != nil {
					b.Fatal(err)
				}
			}
			first := nextID.Add(uint32(b.N)) - uint32(b.N) + 1
			b.ResetTimer()
			for i := range b.N {
				if err := fsquota.SetQuota(dirs[i], first+uint32(i), fsquota.Limits{Bytes: 1 << 30}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("fs="+disk+"/impl=chmod", func(b *testing.B) {
			// One directory whose mode flips, so every call is a real
			// change without making b.N directories first.
			dir := ktest.TempDir(b, disk)
			for i := range b.N {
				if err := unix.Fchmodat(unix.AT_FDCWD, dir, 0o700|uint32(i&1)*0o055, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
