package volume

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/volumetest"
)

// BenchmarkBlockCopies measures a block volume's snapshot and restore
// (one FICLONE each) against a full copy of its image (cp
// --reflink=never, then fsync), on a loop-mounted XFS on the host, for
// written images of the sizes in PLINTH_SNAPSHOT_BENCH_GIB (whole GiB,
// comma-separated; default 1,4: flat in the size is the goal), on an XFS of three times that (the image,
// the snapshot's reservation and the restore's). Each size needs about
// twice its size of free host disk below the temporary directory while
// the full copy runs. It
// reports the data filesystem's growth per operation (B-used/op).
//
// Sub-benchmarks are gib=N/impl=snapshot|restore|cp (the baseline), as
// build/scripts/bench.sh and bench/report read them.
//
//	PLINTH_SNAPSHOT_BENCH_GIB=1,10 go test -run '^$' -bench BlockCopies -benchtime 5x ./node/core/volume
func BenchmarkBlockCopies(b *testing.B) {
	sizes := os.Getenv("PLINTH_SNAPSHOT_BENCH_GIB")
	if sizes == "" {
		sizes = "1,4"
	}
	for _, s := range strings.Split(sizes, ",") {
		gib, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || gib <= 0 {
			b.Fatalf("PLINTH_SNAPSHOT_BENCH_GIB: %q is not a whole number of GiB", s)
		}
		b.Run(fmt.Sprintf("gib=%d", gib), func(b *testing.B) { benchBlockCopies(b, int64(gib)<<30) })
	}
}

func benchBlockCopies(b *testing.B, size int64) {
	ctx := context.Background()
	d, qerr := volumetest.DataDir(b, volumetest.LoopXFS(b, 3*size+(1<<30)))
	m, err := New(Config{Data: d, QuotaError: qerr, AllowUnenforced: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Create(ctx, "src", Block, size); err != nil {
		b.Fatal(err)
	}
	_, img, _ := m.Locate(ctx, "src")
	// Written, as a pod's device is: XFS does not share unwritten
	// extents, so a clone of a fresh image would measure nothing.
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	chunk := pattern(9, 4<<20)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	dst := img + ".copy"
	benchCopies(b, m, Block, size, "", func() error {
		if out, err := exec.Command("cp", "--reflink=never", img, dst).CombinedOutput(); err != nil {
			return fmt.Errorf("cp: %v: %s", err, out)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		f.Close()
		return nil
	}, func() error { return os.Remove(dst) })
}

// BenchmarkFilesystemCopies measures a filesystem volume's snapshot and
// restore (a tree walk, one FICLONE per file) against a full copy (cp -a
// --reflink=never, then syncfs), for a volume of PLINTH_SNAPSHOT_BENCH_FILES
// files of 4 KiB in directories of 1,000 (default 10,000), on a
// loop-mounted XFS on the host. Sub-benchmarks are
// files=N/impl=snapshot|restore|cp (the baseline).
func BenchmarkFilesystemCopies(b *testing.B) {
	files := 10000
	if s := os.Getenv("PLINTH_SNAPSHOT_BENCH_FILES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("PLINTH_SNAPSHOT_BENCH_FILES: %q is not a number of files", s)
		}
		files = n
	}
	ctx := context.Background()
	d, qerr := volumetest.DataDir(b, volumetest.LoopXFS(b, 4<<30))
	m, err := New(Config{Data: d, QuotaError: qerr, AllowUnenforced: true})
	if err != nil {
		b.Fatal(err)
	}
	size := int64(files)*8192 + (64 << 20)
	if _, err := m.Create(ctx, "src", Filesystem, size); err != nil {
		b.Fatal(err)
	}
	_, dir, _ := m.Locate(ctx, "src")
	data := pattern(8, 4096)
	for i := range files {
		sub := fmt.Sprintf("%s/d%03d", dir, i/1000)
		if i%1000 == 0 {
			if err := os.Mkdir(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(fmt.Sprintf("%s/f%06d", sub, i), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	dst := m.Data.Volumes.FullPath() + "/copy"
	benchCopies(b, m, Filesystem, size, fmt.Sprintf("files=%d/", files), func() error {
		if out, err := exec.Command("cp", "-a", "--reflink=never", dir, dst).CombinedOutput(); err != nil {
			return fmt.Errorf("cp: %v: %s", err, out)
		}
		return fsquota.Sync(dst)
	}, func() error { return os.RemoveAll(dst) })
}

// benchCopies runs the sub-benchmarks <prefix>impl=snapshot, impl=restore
// and impl=cp on volume "src" of m (of the given mode and size), each
// reporting the data filesystem's growth per operation (B-used/op).
// fullCopy makes the baseline's full copy of the source and removeCopy
// removes it again.
func benchCopies(b *testing.B, m *Manager, mode Mode, size int64, prefix string, fullCopy, removeCopy func() error) {
	ctx := context.Background()
	b.Run(prefix+"impl=snapshot", func(b *testing.B) {
		benchGrowth(b, m,
			func(i int) error {
				_, err := m.CreateSnapshot(ctx, "src", fmt.Sprintf("snap-%d", i))
				return err
			},
			func(i int) error { return m.DeleteSnapshot(ctx, fmt.Sprintf("snap-%d", i)) })
	})
	if _, err := m.CreateSnapshot(ctx, "src", "snap"); err != nil {
		b.Fatal(err)
	}
	b.Run(prefix+"impl=restore", func(b *testing.B) {
		benchGrowth(b, m,
			func(i int) error {
				_, err := m.Create(ctx, fmt.Sprintf("restored-%d", i), mode, size, FromSnapshot("snap"))
				return err
			},
			func(i int) error { return m.Delete(ctx, fmt.Sprintf("restored-%d", i)) })
	})
	if err := m.DeleteSnapshot(ctx, "snap"); err != nil {
		b.Fatal(err)
	}
	b.Run(prefix+"impl=cp", func(b *testing.B) {
		benchGrowth(b, m, func(int) error { return fullCopy() }, func(int) error { return removeCopy() })
	})
}

// benchGrowth times op(i) for each iteration i, and only op: the undo(i)
// that follows it, and the settled measurements of the data filesystem's
// use around it, are outside the timer. It reports the growth per op as
// B-used/op.
func benchGrowth(b *testing.B, m *Manager, op, undo func(i int) error) {
	usage := func() int64 {
		b.Helper()
		settleFreeSpace(b, m)
		return usedBytes(b, m)
	}
	var grown int64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		before := usage()
		b.StartTimer()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		grown += usage() - before
		if err := undo(i); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(grown)/float64(b.N), "B-used/op")
}
