package core

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

// TestQuotaWatchFindsQuietMove plays a process that may change project
// IDs and knows the watch follows writes: it writes a file and closes it
// first, and only then moves it into neighbour B's project, writing
// nothing after (FS_IOC_FSSETXATTR raises no event the watch could
// follow: fsquota's TestProjectIDChangeIsNotNotified). B's quota is full
// at once. The file lies outside every volume (case outside, beside
// volumes/ on the data filesystem: an emptyDir, a layer, a log) or in
// the process's own volume A (case volume), or in a tree of the node
// share (case share: it gets the share's project); or outside, while B's own
// user rewrites a file of B all along (case busy: B's usage grows by one
// inode more than B's user created, though B is written to); or outside,
// while B's user creates and removes files in B all along (case churn:
// B's inodes grow by one more than B's user created less it removed, and
// by fewer than it created alone, which hid the move before the watch
// counted removals). Within
// quotaWatchBound the watch must have found it anyway, by B's usage
// growing with no write or creation in B to account for it: the outside
// file gets project 0, the volume's file A's project again, and B's
// write of (nearly) its full size succeeds. The engine hands up the room
// given back to B, with the file and, in case volume, volume A as where
// it came from (volume.Manager.TakeReclaimed), for B's claim to hear of.
func TestQuotaWatchFindsQuietMove(t *testing.T) {
	ktest.RequireVM(t)
	for _, where := range []string{"outside", "volume", "share", "busy", "churn"} {
		t.Run(where, func(t *testing.T) {
			var shareDirs []string
			if where == "share" {
				shareDirs = []string{ktest.TempDir(t, "xfs")}
			}
			vols, lt := quotaWatchNode(t, true, shareDirs...)
			b := createVolume(t, vols, "pvc-b", 4*mib)
			idB, _, err := fsquota.ProjectID(b)
			if err != nil {
				t.Fatal(err)
			}
			dir, want := filepath.Join(filepath.Dir(vols.Data.Volumes.FullPath()), "emptydir"), uint32(0)
			switch where {
			case "volume":
				dir = createVolume(t, vols, "pvc-a", 64*mib)
				if want, _, err = fsquota.ProjectID(dir); err != nil {
					t.Fatal(err)
				}
			default:
				if where == "share" {
					dir, want = filepath.Join(shareDirs[0], "emptydir"), volume.ShareProjectID
				}
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "the watch to start", func() bool { return strings.Contains(logs(t, lt), "quota watch: on") })
			room := 4 * mib
			switch where {
			case "busy":
				room -= 64 << 10
				stop := rewriteBusily(t, filepath.Join(b, "busy"))
				defer stop()
			case "churn":
				room -= 64 << 10
				stop := churnBusily(t, b)
				defer stop()
			}
			file := filepath.Join(dir, "quiet")
			if err := volumetest.WriteNew(file, 4*mib); err != nil {
				t.Fatal(err)
			}
			// Let the watch see the write and be done with it: what
			// follows must be found without any event.
			time.Sleep(time.Second)
			if err := fsquota.SetProjectID(file, idB, false); err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			id, used := awaitProjectBack(t, vols, file, want, start.Add(quotaWatchBound))
			werr := volumetest.WriteNew(filepath.Join(b, "own"), room)
			t.Logf("after %s: the file is in project %d (want %d, B is %d); B uses %d bytes; writing %d bytes into B: %v",
				time.Since(start).Round(time.Millisecond), id, want, idB, used, room, werr)
			if id != want || used >= mib || werr != nil {
				t.Fatalf("within %s the watch did not find the file moved quietly into B's project and give B its room; log:\n%s", quotaWatchBound, logs(t, lt))
			}
			// What the user and the operator hear of: a volume's
			// file through the noted repairs (an Event on A's
			// claim, from the volume health monitor), one outside
			// in the watch's log.
			// B's user, whose room the file took, hears of it
			// too (an Event on B's claim), with the volume whose
			// user moved it when it was a volume's.
			if where == "volume" {
				checkReclaimed(t, vols, "pvc-a", "quiet", 4*mib)
			} else {
				checkReclaimed(t, vols, "", file, 4*mib)
			}
			if where == "volume" {
				if r := vols.TakeRepairs()["pvc-a"]; r.Strays == 0 || r.FirstStray != "quiet" {
					t.Errorf("repairs noted for volume A: %+v; want the moved file, for the audit's reporter to tell the user", r)
				}
			} else {
				if l := logs(t, lt); !strings.Contains(l, "released 1 entries") || !strings.Contains(l, file) {
					t.Errorf("the watch did not say what it released:\n%s", l)
				}
				// The operator's counters (the volume health
				// monitor's) come from the noted releases.
				if r := vols.TakeReleases(); r.Strays == 0 || r.FirstStray != file {
					t.Errorf("releases noted: %+v; want the moved file, for the operator's counters", r)
				}
			}
		})
	}
}

// rewriteBusily plays a neighbour's user writing all the time: it
// rewrites the first 4 KiB of file every 20 ms until stop is called.
func rewriteBusily(t *testing.T, file string) (stop func()) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	// A full quota fails the write, as it fails the user's.
	end := busily(func() { f.WriteAt(buf, 0) })
	return func() {
		end()
		f.Close()
	}
}

// churnBusily plays a neighbour's user that makes and removes scratch
// files all the time: every 20 ms it creates a file of 4 KiB in dir and
// removes it, until stop is called.
func churnBusily(t *testing.T, dir string) (stop func()) {
	t.Helper()
	scratch := filepath.Join(dir, "scratch")
	return busily(func() {
		// A full quota fails the write, as it fails the user's.
		_ = os.WriteFile(scratch, make([]byte, 4096), 0o644)
		_ = os.Remove(scratch)
	})
}

// busily runs do every 20 ms until stop is called, and stop returns once
// do has returned for the last time.
func busily(do func()) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			do()
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}
