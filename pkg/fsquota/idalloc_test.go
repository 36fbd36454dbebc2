package fsquota_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"source.plinth.dev/pkg/fsquota"
)

func newAllocator(t *testing.T, dir string, first, last uint32) *fsquota.IDAllocator {
	t.Helper()
	a, err := fsquota.NewIDAllocator(dir, first, last)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestIDAllocatorConcurrent races many allocators (as separate processes
// would be: each has its own cursor) and goroutines over one directory.
func TestIDAllocatorConcurrent(t *testing.T) {
	dir := t.TempDir()
	const allocators, goroutines, perGoroutine = 4, 16, 25
	var (
		mu    sync.Mutex
		owner = map[uint32]string{}
		wg    sync.WaitGroup
	)
	for a := range allocators {
		alloc := newAllocator(t, dir, 1, 1<<20)
		for g := range goroutines {
			wg.Go(func() {
				for i := range perGoroutine {
					name := fmt.Sprintf("vol-%d-%d-%d", a, g, i)
					id, err := alloc.Allocate(name)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if prev, dup := owner[id]; dup {
						t.Errorf("ID %d handed to both %s and %s", id, prev, name)
					}
					owner[id] = name
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(owner) != allocators*goroutines*perGoroutine {
		t.Fatalf("%d IDs allocated, want %d", len(owner), allocators*goroutines*perGoroutine)
	}

	// A restart (a new allocator over the same directory) sees every
	// claim and hands out none of those IDs again.
	restarted := newAllocator(t, dir, 1, 1<<20)
	claims, err := restarted.Claimed()
	if err != nil {
		t.Fatal(err)
	}
	for id, name := range owner {
		if claims[id] != name {
			t.Errorf("after restart ID %d belongs to %q, want %q", id, claims[id], name)
		}
	}
	for i := range 100 {
		id, err := restarted.Allocate(fmt.Sprint("after-restart-", i))
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := owner[id]; dup {
			t.Fatalf("after restart ID %d handed out again (held by %s)", id, prev)
		}
		owner[id] = "after-restart"
	}
}

func TestIDAllocatorWrapsAndExhausts(t *testing.T) {
	a := newAllocator(t, t.TempDir(), 10, 12)
	var got []uint32
	for _, o := range []string{"a", "b", "c"} {
		id, err := a.Allocate(o)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if fmt.Sprint(got) != "[10 11 12]" {
		t.Errorf("allocated %v, want [10 11 12]", got)
	}
	if _, err := a.Allocate("d"); !errors.Is(err, fsquota.ErrIDsExhausted) {
		t.Fatalf("allocating from a full range: %v, want ErrIDsExhausted", err)
	}
	// A freed ID below the cursor is found again after wrapping.
	if err := a.Release(11, "b"); err != nil {
		t.Fatal(err)
	}
	if id, err := a.Allocate("d"); err != nil || id != 11 {
		t.Fatalf("Allocate after Release = %d, %v; want 11", id, err)
	}
}

func TestIDAllocatorClaimReleaseLookup(t *testing.T) {
	dir := t.TempDir()
	a := newAllocator(t, dir, 1, 100)
	if err := a.Claim(42, "vol-a"); err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(42, "vol-a"); err != nil {
		t.Errorf("re-claiming by the same owner: %v", err)
	}
	if err := a.Claim(42, "vol-b"); !errors.Is(err, fsquota.ErrIDInUse) {
		t.Errorf("claiming another owner's ID: %v, want ErrIDInUse", err)
	}
	if err := a.Release(42, "vol-b"); !errors.Is(err, fsquota.ErrIDInUse) {
		t.Errorf("releasing another owner's ID: %v, want ErrIDInUse", err)
	}
	if id, ok, err := a.Lookup("vol-a"); err != nil || !ok || id != 42 {
		t.Errorf("Lookup(vol-a) = %d, %v, %v; want 42", id, ok, err)
	}
	// A restarted allocator starts after the highest claim.
	if id, err := newAllocator(t, dir, 1, 100).Allocate("vol-c"); err != nil || id != 43 {
		t.Errorf("Allocate after restart = %d, %v; want 43", id, err)
	}
	if err := a.Release(42, "vol-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.Lookup("vol-a"); ok {
		t.Error("vol-a still holds an ID after Release")
	}
	if err := a.Release(42, "vol-a"); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
	// Other files in the directory are not claims.
	if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if claims, err := a.Claimed(); err != nil || len(claims) != 1 {
		t.Errorf("Claimed() = %v, %v; want only vol-c's", claims, err)
	}
}

// TestIDAllocatorOwner checks Owner against what Claim, Allocate and
// Release did, and that it agrees with the full listing.
func TestIDAllocatorOwner(t *testing.T) {
	dir := t.TempDir()
	a := newAllocator(t, dir, 1, 100)
	if err := a.Claim(7, "vol-a"); err != nil {
		t.Fatal(err)
	}
	id, err := a.Allocate("vol-b")
	if err != nil {
		t.Fatal(err)
	}
	claims, err := a.Claimed()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		id    uint32
		owner string
	}{{7, "vol-a"}, {id, "vol-b"}} {
		owner, held, err := a.Owner(want.id)
		if err != nil || !held || owner != want.owner {
			t.Errorf("Owner(%d) = %q, %v, %v; want %q", want.id, owner, held, err, want.owner)
		}
		if claims[want.id] != owner {
			t.Errorf("Owner(%d) = %q but Claimed says %q", want.id, owner, claims[want.id])
		}
	}
	if owner, held, err := a.Owner(99); err != nil || held || owner != "" {
		t.Errorf("Owner(unclaimed 99) = %q, %v, %v; want not held", owner, held, err)
	}
	if err := a.Release(7, "vol-a"); err != nil {
		t.Fatal(err)
	}
	if owner, held, err := a.Owner(7); err != nil || held {
		t.Errorf("Owner(7) after Release = %q, %v, %v; want not held", owner, held, err)
	}
	// A regular file at an ID's name is no claim, but the ID is not free
	// either (Allocate's symlink would fail): Owner reports an error.
	if err := os.WriteFile(filepath.Join(dir, "50"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Owner(50); err == nil {
		t.Error("Owner(50) with a regular file at its claim path succeeded")
	}
}

func TestIDAllocatorBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, r := range [][2]uint32{{0, 10}, {5, 4}} {
		if _, err := fsquota.NewIDAllocator(dir, r[0], r[1]); err == nil {
			t.Errorf("NewIDAllocator(%d, %d) succeeded", r[0], r[1])
		}
	}
	a := newAllocator(t, dir, 1, 10)
	for _, owner := range []string{"", "a\x00b", string(make([]byte, 300))} {
		if _, err := a.Allocate(owner); err == nil {
			t.Errorf("Allocate(%q) succeeded", owner)
		}
	}
	if err := a.Claim(11, "x"); err == nil {
		t.Error("claiming an ID outside the range succeeded")
	}
	if claims, _ := a.Claimed(); len(claims) != 0 {
		t.Errorf("bad input left claims behind: %v", claims)
	}
}
