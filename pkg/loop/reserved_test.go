package loop_test

import (
	"fmt"
	"os"
	"testing"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/loop/looptest"
	"source.plinth.dev/test/ktest"
)

// TestTenantFreesAnUnheldDevice is the kernel rule behind the reuse of a
// tenant's loop number: a device nobody else holds open is detached by
// its tenant's LOOP_CLR_FD as soon as the tenant closes it, and its number
// is free for the next file.
func TestTenantFreesAnUnheldDevice(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := looptest.Clear(d.Path()); err != nil {
		t.Fatal(err)
	}
	waitUnbound(t, path)
}

// TestHeldDeviceOutlivesTenantClear: while the owner keeps its descriptor,
// a tenant's LOOP_CLR_FD only marks the device autoclear and it stays bound
// to the owner's file; ClearAutoclear takes the mark back, so the device
// also outlives the owner's close. Without ClearAutoclear the close frees
// it (the negative control, on a second device).
func TestHeldDeviceOutlivesTenantClear(t *testing.T) {
	ktest.RequireRoot(t)
	kept, freed := backing(t, "", 8*MiB), backing(t, "", 8*MiB)
	d, other := create(t, kept, loop.Options{}), create(t, freed, loop.Options{})
	for _, dev := range []*loop.Device{d, other} {
		if err := looptest.Clear(dev.Path()); err != nil {
			t.Fatal(err)
		}
		if flags, err := dev.Flags(); err != nil || !flags.Autoclear {
			t.Fatalf("%s after the tenant's LOOP_CLR_FD: flags %+v (%v), want autoclear set and still bound", dev.Path(), flags, err)
		}
	}
	if got := boundTo(t, kept); len(got) != 1 || got[0] != fmt.Sprintf("loop%d", d.Number()) {
		t.Fatalf("held %s is served by %v after the tenant's clear, want loop%d", kept, got, d.Number())
	}
	if err := d.ClearAutoclear(); err != nil {
		t.Fatal(err)
	}
	if flags, err := d.Flags(); err != nil || flags.Autoclear {
		t.Fatalf("flags after ClearAutoclear: %+v (%v), want autoclear cleared", flags, err)
	}
	if err := d.ClearAutoclear(); err != nil {
		t.Errorf("ClearAutoclear of a device without the flag: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := boundTo(t, kept); len(got) != 1 {
		t.Errorf("%s is served by %v once its owner closed it, want still bound", kept, got)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	waitUnbound(t, freed)
}

// TestCreateExceptSkipsReservedNumbers frees a device and asks for a new
// one with its number reserved: the kernel offers that number (the lowest
// free), CreateExcept takes another, and a plain Create, asked next, takes
// the offered number (the control that the kernel did offer it).
func TestCreateExceptSkipsReservedNumbers(t *testing.T) {
	ktest.RequireRoot(t)
	first := create(t, backing(t, "", MiB), loop.Options{})
	n := first.Number()
	if err := first.Detach(); err != nil {
		t.Fatal(err)
	}
	path := backing(t, "", MiB)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reserved := func(m int) bool { return m == n }
	var asked []int
	d, err := loop.CreateExcept(f, loop.Options{}, func(m int) bool { asked = append(asked, m); return reserved(m) })
	if err != nil {
		t.Fatalf("CreateExcept with loop%d reserved: %v", n, err)
	}
	t.Cleanup(func() { d.Remove() })
	if d.Number() == n {
		t.Fatalf("CreateExcept bound %s to the reserved loop%d", path, n)
	}
	if got := boundTo(t, path); len(got) != 1 || got[0] != fmt.Sprintf("loop%d", d.Number()) {
		t.Errorf("%s is served by %v, want loop%d", path, got, d.Number())
	}
	plain := create(t, backing(t, "", MiB), loop.Options{})
	if plain.Number() != n && !servesOther(n, "") {
		t.Errorf("a plain Create took loop%d, not the free loop%d: the test did not prove the kernel offered it (asked about %v)", plain.Number(), n, asked)
	}
}
