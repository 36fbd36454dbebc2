package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

// quotaWatchBound is how soon the watch must have put a moved file back:
// well under the quota audit's 10-minute walks, which are not running
// here, and well over the watch's batch and a walk of a small volume, so
// that a slow VM does not fail the test.
const quotaWatchBound = 5 * time.Second

const mib = 1 << 20

// TestQuotaWatchPutsMovedFileBack plays a process that may change project
// IDs (a pod on a cluster whose runtime does not refuse the ioctl): it
// moves a file of its volume A into neighbour B's project and fills B's
// quota by writing into it. With the node's root running, the quota
// watch puts the file back into A's project within quotaWatchBound, and B
// has its room again. The negative control, without the watch, shows the
// move persisting for as long: nothing else in the test repairs it.
func TestQuotaWatchPutsMovedFileBack(t *testing.T) {
	ktest.RequireVM(t)
	for _, watched := range []bool{true, false} {
		name := map[bool]string{true: "watched", false: "unwatched"}[watched]
		t.Run(name, func(t *testing.T) {
			vols, lt := quotaWatchNode(t, watched)
			a := createVolume(t, vols, "pvc-a", 64*mib)
			b := createVolume(t, vols, "pvc-b", 4*mib)
			idA, _, err := fsquota.ProjectID(a)
			if err != nil {
				t.Fatal(err)
			}
			idB, _, err := fsquota.ProjectID(b)
			if err != nil {
				t.Fatal(err)
			}
			if watched {
				eventually(t, "the watch to start", func() bool { return strings.Contains(logs(t, lt), "quota watch: on") })
			}

			// The move and the write. Whether the write fills B
			// before the watch steps in is a race the watch may
			// win; the control shows that without it B ends full.
			file := escapeInto(t, a, idB, 4*mib)

			start := time.Now()
			id, used := awaitProjectBack(t, vols, file, idA, start.Add(quotaWatchBound))
			werr := volumetest.WriteNew(filepath.Join(b, "own"), 2*mib)
			t.Logf("after %s: the file is in project %d (A is %d, B %d); B uses %d bytes; writing 2 MiB into B: %v",
				time.Since(start).Round(time.Millisecond), id, idA, idB, used, werr)
			if !watched {
				if id != idB || !errors.Is(werr, unix.ENOSPC) {
					t.Fatalf("without the watch the move did not persist (project %d, B's write %v): this test cannot tell the watch's work from something else's", id, werr)
				}
				return
			}
			if id != idA || used >= mib || werr != nil {
				t.Fatalf("within %s the watch did not put the moved file back into volume A's project and give B its room", quotaWatchBound)
			}
			if l := logs(t, lt); !strings.Contains(l, "put \"escape\"") {
				t.Errorf("the watch did not say what it put back:\n%s", l)
			}
			// What the user is told of comes from the noted repairs
			// (the volume health monitor's report).
			if r := vols.TakeRepairs()["pvc-a"]; r.Strays == 0 || r.FirstStray != "escape" {
				t.Errorf("repairs noted for volume A: %+v; want the put-back file, for the audit's reporter to tell the user", r)
			}
			// And B's user, whose room it took, hears that A's
			// user took it (how much depends on how far the
			// write came before the watch stepped in).
			checkReclaimed(t, vols, "pvc-a", "escape", 1)
		})
	}
}

// TestQuotaWatchNamesEntryByItsPath checks what the watch's check of one
// entry reports when the entry lies in a subdirectory of its volume: a
// pod makes a directory, moves it out of the volume's project (so the
// check of its creation found nothing), then writes a file in it. The
// check of that file is called directly, as the watch calls it for the
// file's event, so the order is the one CI met (the file's event checked
// before any walk reaches the directory). The user is told of the file by
// its path in the volume, "moved-out/big", which is where they look for
// it, not by its bare name.
func TestQuotaWatchNamesEntryByItsPath(t *testing.T) {
	ktest.RequireVM(t)
	vols, _ := quotaWatchNode(t, false)
	a := createVolume(t, vols, "pvc-a", 64*mib)
	moved := filepath.Join(a, "moved-out")
	if err := os.Mkdir(moved, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsquota.SetProjectID(moved, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := volumetest.WriteNew(filepath.Join(moved, "big"), mib); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(moved, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	dp, err := vols.ProjectOfDir(fd)
	if err != nil {
		t.Fatal(err)
	}
	if dp.Volume != "pvc-a" || dp.InVolume != "moved-out" {
		t.Fatalf("ProjectOfDir(%s) = %+v, want volume pvc-a, in it at moved-out", moved, dp)
	}
	walks := &quotaWalks{vols: vols, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
	checkVolumeEntry(context.Background(), logtree.New().LeveledFor("test"), vols, &batchDir{fd: fd, DirProject: dp}, "big", walks)
	r := vols.TakeRepairs()["pvc-a"]
	if r.Strays != 1 || r.FirstStray != "moved-out/big" {
		t.Errorf("repair noted for the file: %+v; want one stray, named by its path in the volume, \"moved-out/big\"", r)
	}
	if ids, _ := walks.take(); len(ids) != 1 || ids[0] != "pvc-a" {
		t.Errorf("the check asked for walks of %v, want one of pvc-a, which finds the directory", ids)
	}
}

// TestQuotaWatchResetsOutsideFile plays the same process on a file outside
// every volume: one in a directory beside volumes/ on the data filesystem,
// standing for an emptyDir, a container's layer or a pod's log. It moves
// the file into volume B's project and fills B's quota by writing into it.
// With the node's root running, the quota watch gives the file project 0
// within quotaWatchBound (case watched; no node share is set up), or the
// node share's project where the directory lies in a share tree (case
// share), and B's write of its full size succeeds. The negative control,
// without the watch, shows the move persisting for as long.
func TestQuotaWatchResetsOutsideFile(t *testing.T) {
	ktest.RequireVM(t)
	for _, tc := range []struct {
		name           string
		watched, share bool
		want           uint32
	}{
		{"watched", true, false, 0},
		{"share", true, true, volume.ShareProjectID},
		{"unwatched", false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var shareDirs []string
			if tc.share {
				shareDirs = []string{ktest.TempDir(t, "xfs")}
			}
			vols, lt := quotaWatchNode(t, tc.watched, shareDirs...)
			watched := tc.watched
			b := createVolume(t, vols, "pvc-b", 4*mib)
			idB, _, err := fsquota.ProjectID(b)
			if err != nil {
				t.Fatal(err)
			}
			if watched {
				eventually(t, "the watch to start", func() bool { return strings.Contains(logs(t, lt), "quota watch: on") })
			}
			outside := filepath.Join(filepath.Dir(vols.Data.Volumes.FullPath()), "emptydir")
			if tc.share {
				outside = filepath.Join(shareDirs[0], "emptydir")
			}
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			file := escapeInto(t, outside, idB, 4*mib)

			start := time.Now()
			id, used := awaitProjectBack(t, vols, file, tc.want, start.Add(quotaWatchBound))
			werr := volumetest.WriteNew(filepath.Join(b, "own"), 4*mib)
			t.Logf("after %s: the outside file is in project %d (B is %d); B uses %d bytes; writing 4 MiB into B: %v",
				time.Since(start).Round(time.Millisecond), id, idB, used, werr)
			if !watched {
				if id != idB || !errors.Is(werr, unix.ENOSPC) {
					t.Fatalf("without the watch the move did not persist (project %d, B's write %v): this test cannot tell the watch's work from something else's", id, werr)
				}
				return
			}
			if id != tc.want || used >= mib || werr != nil {
				t.Fatalf("within %s the watch did not give the outside file project %d and B its room", quotaWatchBound, tc.want)
			}
			if l := logs(t, lt); !strings.Contains(l, "escape") {
				t.Errorf("the watch did not say what it reset:\n%s", l)
			}
			if r := vols.TakeReleases(); r.Strays == 0 || r.FirstStray != file {
				t.Errorf("releases noted: %+v; want the moved file %s, for the operator's counters", r, file)
			}
			// B's user, whose writes failed, hears of it too.
			checkReclaimed(t, vols, "", file, 4*mib)
		})
	}
}

// checkReclaimed checks what the engine hands up for the volume health
// monitor to tell pvc-b's claim (volume.Manager.TakeReclaimed): the file
// first, moved by the user of volume from ("" outside every volume), and
// at least the least bytes it took of pvc-b's room.
func checkReclaimed(t *testing.T, vols *volume.Manager, from, first string, least int64) {
	t.Helper()
	got := vols.TakeReclaimed()
	r, ok := got["pvc-b"]
	if !ok || r.Entries == 0 || r.Bytes < least || len(r.Sources) != 1 || r.Sources[0].From != from || r.Sources[0].First != first {
		t.Errorf("room reclaimed for volume B: %+v (all: %+v); want the moved file %q and at least %d bytes, from volume %q alone, for B's claim to hear of", r, got, first, least, from)
	}
}

// awaitProjectBack polls, until deadline, for file to be in project want
// and volume pvc-b, whose project the file was moved into, to use less
// than a MiB again. It returns the file's project and pvc-b's use as last
// seen, whether or not they got there.
func awaitProjectBack(t *testing.T, vols *volume.Manager, file string, want uint32, deadline time.Time) (uint32, int64) {
	t.Helper()
	for {
		id, _, err := fsquota.ProjectID(file)
		if err != nil {
			t.Fatal(err)
		}
		st, err := vols.Stat(context.Background(), "pvc-b")
		if err != nil {
			t.Fatal(err)
		}
		if (id == want && st.UsedBytes < mib) || time.Now().After(deadline) {
			return id, st.UsedBytes
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// quotaWatchNode starts the node's root over a data directory on the VM's
// XFS with project quotas, without services, and returns its volume
// engine. Without watched, only the volume engine is made: no root, no
// watch. shareDirs, with watched, are the node share's directories.
func quotaWatchNode(t testing.TB, watched bool, shareDirs ...string) (*volume.Manager, *logtree.LogTree) {
	t.Helper()
	var root localstorage.Root
	if err := root.Place(ktest.TempDir(t, "xfs")); err != nil {
		t.Fatal(err)
	}
	if !watched {
		if err := root.Data.MkdirAll(); err != nil {
			t.Fatal(err)
		}
		dd, err := PrepareDataDir(&root.Data, DataDirOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vols, err := volume.New(volume.Config{Data: &root.Data, QuotaError: dd.QuotaProbeError()})
		if err != nil {
			t.Fatal(err)
		}
		return vols, nil
	}
	got := make(chan *Env, 1)
	r, err := Root(Config{Root: &root, NodeName: "node-a", NodeShare: volume.NodeShare{Dirs: shareDirs}, Services: []Service{envService("probe", got)}})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, r)
	env := waitEnv(t, got)
	if !env.Volumes.CapacityEnforced() {
		t.Fatal("the VM's XFS does not enforce project quotas")
	}
	return env.Volumes, lt
}

// createVolume makes filesystem volume id of size bytes and returns its
// directory.
func createVolume(t testing.TB, vols *volume.Manager, id string, size int64) string {
	t.Helper()
	if _, err := vols.Create(context.Background(), id, volume.Filesystem, size); err != nil {
		t.Fatal(err)
	}
	_, dir, err := vols.Locate(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// escapeInto plays a process that may change project IDs: it creates the
// file dir/escape, moves it into project id and fills that project's
// quota through it (fillFile, up to n bytes). It returns the file's path.
func escapeInto(t *testing.T, dir string, id uint32, n int) string {
	t.Helper()
	file := filepath.Join(dir, "escape")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fsquota.SetProjectID(file, id, false); err != nil {
		t.Fatal(err)
	}
	fillFile(t, file, n)
	return file
}

// fillFile appends up to n bytes to file in 64 KiB writes, stopping at
// the first ENOSPC (the quota its project charges is full), and syncs.
func fillFile(t *testing.T, file string, n int) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for written := 0; written < n; written += len(chunk) {
		if _, err := f.Write(chunk); errors.Is(err, unix.ENOSPC) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, unix.ENOSPC) {
		t.Fatal(err)
	}
}

// BenchmarkQuotaWatchWriteCost measures what the quota watch costs a
// writer in a filesystem volume: the same writes with the node's root
// running (impl=watched) and with the volume engine alone
// (impl=unwatched, the baseline), on the VM's XFS. work=rewrite
// overwrites 4 KiB of one file per op, the busy writer whose events the
// kernel merges into one per batch; work=files truncates, writes (4 KiB)
// and closes one of 10,000 files per op, in turn (created by the first
// 10,000 ops), the worst case: one check per file and batch.
func BenchmarkQuotaWatchWriteCost(b *testing.B) {
	ktest.RequireVM(b)
	for _, work := range []string{"rewrite", "files"} {
		b.Run("work="+work, func(b *testing.B) {
			for _, watched := range []bool{false, true} {
				impl := map[bool]string{true: "watched", false: "unwatched"}[watched]
				b.Run("impl="+impl, func(b *testing.B) {
					vols, _ := quotaWatchNode(b, watched)
					dir := createVolume(b, vols, "pvc-bench", 256*mib)
					benchWrites(b, dir, work)
				})
			}
		})
	}
}

// benchWrites runs b.N ops of work in dir.
func benchWrites(b *testing.B, dir, work string) {
	buf := make([]byte, 4096)
	if work == "rewrite" {
		f, err := os.Create(filepath.Join(dir, "busy"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for b.Loop() {
			if _, err := f.WriteAt(buf, 0); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	i := 0
	for b.Loop() {
		i = (i + 1) % 10000
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// TestQuotaWatchLeavesQuarantineAlone moves a volume into quarantine, and
// writes into it there, with the quota watch running: the watch must not
// take the quarantined volume for a file outside every volume, or its
// directory would lose its project ID and PROJINHERIT, and the volume
// would come back from quarantine without its quota over new files.
func TestQuotaWatchLeavesQuarantineAlone(t *testing.T) {
	ktest.RequireVM(t)
	vols, lt := quotaWatchNode(t, true)
	ctx := context.Background()
	dir := createVolume(t, vols, "pvc-q", 4*mib)
	id, _, err := fsquota.ProjectID(dir)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watch to start", func() bool { return strings.Contains(logs(t, lt), "quota watch: on") })
	if err := vols.SetReclaimPolicy(ctx, "pvc-q", volume.ReclaimDelete); err != nil {
		t.Fatal(err)
	}
	if err := vols.Quarantine(ctx, "pvc-q", time.Now()); err != nil {
		t.Fatal(err)
	}
	qs, err := vols.Quarantined(ctx)
	if err != nil || len(qs) != 1 {
		t.Fatalf("quarantined volumes: %v, %v; want pvc-q", qs, err)
	}
	if err := volumetest.WriteNew(filepath.Join(qs[0].Path, "late"), 4096); err != nil {
		t.Fatal(err)
	}
	// Several of the watch's batches pass: time for it to act, if it
	// would.
	time.Sleep(2 * time.Second)
	for _, p := range []string{qs[0].Path, filepath.Join(qs[0].Path, "late")} {
		got, inherit, err := fsquota.ProjectID(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != id || (p == qs[0].Path && !inherit) {
			t.Errorf("%s in quarantine: project %d, PROJINHERIT %v; want the volume's project %d kept", p, got, inherit, id)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs(t, lt))
	}
}
