package volume

import (
	"reflect"
	"testing"

	"source.plinth.dev/pkg/fsquota"
)

// TestRepairsAddUpUntilTaken: repairs noted for a volume add up, keep the
// first stray's name, wake the waiters, and are gone once taken; a repair
// that put nothing back is not noted.
func TestRepairsAddUpUntilTaken(t *testing.T) {
	var m Manager
	woken := m.Repaired()
	m.NoteRepair("pvc-a", fsquota.Restored{})
	select {
	case <-woken:
		t.Fatal("a repair that put nothing back woke the reporter")
	default:
	}
	m.NoteRepair("pvc-a", fsquota.Restored{Strays: 1, StrayBytes: 4096, FirstStray: "first"})
	m.NoteRepair("pvc-a", fsquota.Restored{Strays: 2, StrayBytes: 8192, FirstStray: "second"})
	m.NoteRepair("pvc-b", fsquota.Restored{Strays: 1, StrayBytes: 1, FirstStray: "b"})
	select {
	case <-woken:
	default:
		t.Fatal("noting a repair did not wake the reporter")
	}
	got := m.TakeRepairs()
	if a := got["pvc-a"]; a.Strays != 3 || a.StrayBytes != 12288 || a.FirstStray != "first" {
		t.Errorf("repairs of pvc-a: %+v; want 3 strays, 12288 bytes, the first named first", a)
	}
	if len(got) != 2 {
		t.Errorf("repairs taken: %v; want pvc-a and pvc-b", got)
	}
	if again := m.TakeRepairs(); len(again) != 0 {
		t.Errorf("repairs taken twice: %v", again)
	}
}

// TestReleasesAddUpUntilTaken: releases outside every volume add up apart
// from any volume's repairs, wake the waiters, and are gone once taken.
func TestReleasesAddUpUntilTaken(t *testing.T) {
	var m Manager
	woken := m.Repaired()
	m.NoteRelease(fsquota.Restored{})
	select {
	case <-woken:
		t.Fatal("a release of nothing woke the reporter")
	default:
	}
	m.NoteRelease(fsquota.Restored{Strays: 1, StrayBytes: 4096, FirstStray: "/data/emptydir/a"})
	m.NoteRelease(fsquota.Restored{Strays: 2, StrayBytes: 8192, FirstStray: "/data/emptydir/b"})
	select {
	case <-woken:
	default:
		t.Fatal("noting a release did not wake the reporter")
	}
	if r := m.TakeReleases(); r.Strays != 3 || r.StrayBytes != 12288 || r.FirstStray != "/data/emptydir/a" {
		t.Errorf("releases: %+v; want 3 entries, 12288 bytes, the first /data/emptydir/a", r)
	}
	if len(m.TakeRepairs()) != 0 {
		t.Error("releases were taken as a volume's repairs")
	}
	if again := m.TakeReleases(); again.Strays != 0 {
		t.Errorf("releases taken twice: %+v", again)
	}
}

// TestReclaimedGoesToTheProjectsOwner: room given back to a project by a
// repair of volume A or a release outside every volume is noted for the
// volume holding that project, with where the entries came from, adds up
// per volume, and is gone once taken. A project no volume holds, and A's
// own, are nobody's to tell. The audit's walks hand theirs over the same
// way (NoteReclaimed).
func TestReclaimedGoesToTheProjectsOwner(t *testing.T) {
	ids, err := fsquota.NewIDAllocator(t.TempDir(), FirstProjectID, LastProjectID)
	if err != nil {
		t.Fatal(err)
	}
	m := Manager{ProjectIDs: ids}
	pid := map[string]uint32{}
	for _, v := range []string{"pvc-a", "pvc-b"} {
		if pid[v], err = ids.Allocate(v); err != nil {
			t.Fatal(err)
		}
	}
	unheld := pid["pvc-b"] + 1
	m.NoteRepair("pvc-a", fsquota.Restored{Strays: 3, StrayBytes: 12288, FirstStray: "dir/x", From: map[uint32]fsquota.Charge{
		pid["pvc-b"]: {Entries: 2, Bytes: 8192, First: "dir/x"},
		pid["pvc-a"]: {Entries: 1, Bytes: 4096, First: "own"},
		unheld:       {Entries: 1, Bytes: 4096, First: "gone"},
	}})
	m.NoteRelease(fsquota.Restored{Strays: 1, StrayBytes: 4096, FirstStray: "/data/emptydir/y", From: map[uint32]fsquota.Charge{
		pid["pvc-b"]: {Entries: 1, Bytes: 4096, First: "/data/emptydir/y"},
		pid["pvc-a"]: {Entries: 1, Bytes: 1024, First: "/data/emptydir/z"},
	}})
	got := m.TakeReclaimed()
	want := map[string]Reclaimed{
		"pvc-b": {Entries: 3, Bytes: 12288, Sources: []ReclaimedSource{
			{From: "pvc-a", Entries: 2, Bytes: 8192, First: "dir/x"},
			{From: "", Entries: 1, Bytes: 4096, First: "/data/emptydir/y"},
		}},
		"pvc-a": {Entries: 1, Bytes: 1024, Sources: []ReclaimedSource{{From: "", Entries: 1, Bytes: 1024, First: "/data/emptydir/z"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reclaimed: %+v; want %+v", got, want)
	}
	if again := m.TakeReclaimed(); len(again) != 0 {
		t.Errorf("reclaimed taken twice: %+v", again)
	}

	// The audit's walks hand theirs over apart (NoteReclaimed): noted
	// the same way, and the reporter woken only when there was some.
	woken := m.Repaired()
	m.NoteReclaimed("pvc-a", map[uint32]fsquota.Charge{unheld: {Entries: 1, Bytes: 1, First: "gone"}})
	select {
	case <-woken:
		t.Error("handing over room nobody holds woke the reporter")
	default:
	}
	m.NoteReclaimed("pvc-a", map[uint32]fsquota.Charge{pid["pvc-b"]: {Entries: 1, Bytes: 4096, First: "x"}})
	select {
	case <-woken:
	default:
		t.Error("handing over room of pvc-b did not wake the reporter")
	}
	if got := m.TakeReclaimed(); !reflect.DeepEqual(got, map[string]Reclaimed{"pvc-b": {Entries: 1, Bytes: 4096, Sources: []ReclaimedSource{{From: "pvc-a", Entries: 1, Bytes: 4096, First: "x"}}}}) {
		t.Errorf("reclaimed handed over by the audit: %+v", got)
	}
}
