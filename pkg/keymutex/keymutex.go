// Package keymutex serialises work per key — a volume ID, a target path —
// for code that must never run two operations on the same object at once but
// should run operations on different objects in parallel.
//
// A mutex exists only while somebody holds or waits for it, so a long-running
// node does not keep one mutex for every volume it has ever seen.
package keymutex

import (
	"slices"
	"sync"
)

// Set is a set of per-key mutexes. The zero value is ready to use; a Set must
// not be copied after first use.
type Set struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	sync.Mutex
	// refs counts holders and waiters; the entry leaves the map at zero.
	refs int
}

// Lock takes the mutexes of all keys and returns the function that releases
// them. Keys are taken in sorted order, so two callers locking overlapping
// sets (a volume and a target, say) can never wait for each other crosswise;
// a key named twice is taken once.
func (s *Set) Lock(keys ...string) (unlock func()) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	held := make([]*entry, 0, len(keys))
	for _, k := range keys {
		held = append(held, s.lockOne(k))
	}
	return func() {
		for i := len(held) - 1; i >= 0; i-- {
			s.unlockOne(keys[i], held[i])
		}
	}
}

func (s *Set) lockOne(key string) *entry {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = make(map[string]*entry)
	}
	e := s.locks[key]
	if e == nil {
		e = &entry{}
		s.locks[key] = e
	}
	e.refs++
	s.mu.Unlock()
	e.Lock()
	return e
}

func (s *Set) unlockOne(key string, e *entry) {
	e.Unlock()
	s.mu.Lock()
	e.refs--
	if e.refs == 0 {
		delete(s.locks, key)
	}
	s.mu.Unlock()
}

// size is the number of live mutexes (for tests).
func (s *Set) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.locks)
}
