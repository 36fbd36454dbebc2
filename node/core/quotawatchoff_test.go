package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

// TestQuotaWatchOffLeavesItToTheAudit: where the watch cannot run (here:
// plinth-node without CAP_SYS_ADMIN, which a filesystem-wide fanotify mark
// needs; a kernel before 5.9 or a filesystem that cannot report file
// handles ends it the same way), it says so once, `quota watch: off`, and
// ends: no watch runs. A file of volume A then moved into B's project and
// written until B is full stays there for quotaWatchBound, and nothing is
// noted for the reporter (no repair, release or reclaimed room); the
// audit's walk of A (Manager.RestoreProjectIDs) still puts it back and
// gives B its room.
func TestQuotaWatchOffLeavesItToTheAudit(t *testing.T) {
	ktest.RequireVM(t)
	vols, _ := quotaWatchNode(t, false)
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

	var lt *logtree.LogTree
	withoutSysAdmin(t, func() {
		_, lt = supervisor.TestHarness(t, quotaWatchRunnable(vols))
		eventually(t, "the watch to say it is off", func() bool { return strings.Contains(logs(t, lt), "quota watch: off") })
	})
	log := logs(t, lt)
	if !strings.Contains(log, "operation not permitted") || strings.Contains(log, "quota watch: on") {
		t.Fatalf("the watch did not end for want of permission:\n%s", log)
	}

	file := escapeInto(t, a, idB, 4*mib)
	time.Sleep(quotaWatchBound)
	id, _, err := fsquota.ProjectID(file)
	if err != nil {
		t.Fatal(err)
	}
	werr := volumetest.WriteNew(filepath.Join(b, "own"), 2*mib)
	t.Logf("after %s with the watch off: the file is in project %d (A is %d, B %d); writing 2 MiB into B: %v", quotaWatchBound, id, idA, idB, werr)
	if id != idB || !errors.Is(werr, unix.ENOSPC) {
		t.Errorf("with the watch off, something put the file back (project %d, B's write: %v)", id, werr)
	}
	if r, rel, rec := vols.TakeRepairs(), vols.TakeReleases(), vols.TakeReclaimed(); len(r) != 0 || rel.Strays != 0 || len(rec) != 0 {
		t.Errorf("with the watch off, noted: repairs %+v, releases %+v, reclaimed %+v; want nothing", r, rel, rec)
	}

	r, err := vols.RestoreProjectIDs(context.Background(), "pvc-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ = fsquota.ProjectID(file)
	werr = volumetest.WriteNew(filepath.Join(b, "own"), 2*mib)
	t.Logf("the audit's walk of A: %+v; the file is in project %d; writing 2 MiB into B: %v", r, id, werr)
	if r.Strays == 0 || id != idA || werr != nil {
		t.Errorf("the audit's walk did not put the file back into A's project and give B its room")
	}

	// A file outside every volume (an emptyDir's) moved into B's project:
	// no volume's walk sees it, and no watch runs. Each round of the
	// audit (volumehealth) ends with the watch's search outside every
	// volume (Manager.ReleaseOutside) and notes what it released.
	if err := os.Remove(filepath.Join(b, "own")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(vols.Data.Volumes.FullPath()), "emptydir")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	ofile := escapeInto(t, outside, idB, 4*mib)
	if _, err := vols.RestoreProjectIDs(context.Background(), "pvc-b", nil); err != nil {
		t.Fatal(err)
	}
	id, _, _ = fsquota.ProjectID(ofile)
	werr = volumetest.WriteNew(filepath.Join(b, "own"), 2*mib)
	t.Logf("outside every volume, after B's own walk: the file is in project %d; writing 2 MiB into B: %v", id, werr)
	if id != idB || !errors.Is(werr, unix.ENOSPC) {
		t.Fatalf("with the watch off, something released the outside file (project %d, B's write %v): this test cannot tell the search's work", id, werr)
	}
	// The refused write may have left no file, or a part of one.
	if err := os.RemoveAll(filepath.Join(b, "own")); err != nil {
		t.Fatal(err)
	}
	rel, err := vols.ReleaseOutside(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	vols.NoteRelease(rel)
	id, _, _ = fsquota.ProjectID(ofile)
	werr = volumetest.WriteNew(filepath.Join(b, "own"), 2*mib)
	t.Logf("the audit's search outside every volume: %+v; the file is in project %d; writing 2 MiB into B: %v", rel, id, werr)
	if rel.Strays == 0 || id != 0 || werr != nil {
		t.Errorf("the search outside every volume did not release the file and give B its room")
	}
	checkReclaimed(t, vols, "", ofile, mib)
}

// withoutSysAdmin runs f with CAP_SYS_ADMIN out of every thread's
// effective set, and puts it back after: the test binary runs as root in
// the VM, and capabilities are per thread (AllThreadsSyscall needs a
// binary without cgo, as the VM's are).
func withoutSysAdmin(t *testing.T, f func()) {
	t.Helper()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	set := func(effective uint32) {
		t.Helper()
		d := data
		d[0].Effective = effective
		if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&d[0])), 0); errno != 0 {
			t.Fatalf("capset: %v", errno)
		}
	}
	full := data[0].Effective
	set(full &^ (1 << unix.CAP_SYS_ADMIN))
	defer set(full)
	f()
}
