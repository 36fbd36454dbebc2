package keymutex

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestExclusivePerKey runs many goroutines on one key and checks that no two
// are ever inside at once.
func TestExclusivePerKey(t *testing.T) {
	var s Set
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := s.Lock("vol")
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(100 * time.Microsecond)
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if got := maxInside.Load(); got != 1 {
		t.Fatalf("%d goroutines held the same key at once, want 1", got)
	}
	if n := s.size(); n != 0 {
		t.Fatalf("%d mutexes left after every holder released, want 0", n)
	}
}

// TestDifferentKeysDoNotBlock holds one key and takes another: that must not
// wait.
func TestDifferentKeysDoNotBlock(t *testing.T) {
	var s Set
	unlockA := s.Lock("a")
	defer unlockA()
	done := make(chan struct{})
	go func() {
		s.Lock("b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("locking key b waited for the holder of key a")
	}
}

// TestHolderBlocksSameKey checks that a second Lock of a held key waits until
// the holder releases it.
func TestHolderBlocksSameKey(t *testing.T) {
	var s Set
	unlock := s.Lock("a")
	got := make(chan struct{})
	go func() {
		s.Lock("a", "b")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a held key was taken a second time")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the key after it was released")
	}
}

// TestOverlappingSetsInAnyOrder locks the same two keys named in opposite
// orders from many goroutines; sorted acquisition means no deadlock.
func TestOverlappingSetsInAnyOrder(t *testing.T) {
	var s Set
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				s.Lock("volume", "target")()
			} else {
				s.Lock("target", "volume")()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("goroutines locking overlapping key sets deadlocked")
	}
}

// TestDuplicateKey must not deadlock on itself, and must not reorder the
// caller's slice.
func TestDuplicateKey(t *testing.T) {
	var s Set
	keys := []string{"b", "a", "b"}
	done := make(chan struct{})
	go func() {
		s.Lock(keys...)()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a key named twice deadlocked")
	}
	if keys[0] != "b" || keys[1] != "a" || keys[2] != "b" {
		t.Fatalf("Lock reordered the caller's keys: %v", keys)
	}
	if n := s.size(); n != 0 {
		t.Fatalf("%d mutexes left, want 0", n)
	}
}
