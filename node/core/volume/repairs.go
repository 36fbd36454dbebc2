package volume

import (
	"maps"
	"sync"

	"source.plinth.dev/pkg/fsquota"
)

// repairs keeps what was put back into volumes' project quotas outside
// the audit's own walks (the quota watch's repairs, in node/core), per
// volume, until the audit's reporter takes it. The watch answers a moved
// file within a second, long before the audit's next walk, which then
// finds nothing to put back: without this, the user would never hear of
// the escape. The zero value is ready to use.
type repairs struct {
	mu      sync.Mutex
	pending map[string]fsquota.Restored
	// released is what was taken out of volumes' project quotas
	// outside every volume (NoteRelease): no claim's, so kept apart.
	released fsquota.Restored
	noted    changes
}

// NoteRepair adds r, what was just put back into volume id's project
// quota, to what TakeRepairs returns next, and wakes the waiters of
// Repaired. A repair that put nothing back is not noted.
func (m *Manager) NoteRepair(id string, r fsquota.Restored) {
	if r.Strays == 0 {
		return
	}
	m.repairs.mu.Lock()
	if m.repairs.pending == nil {
		m.repairs.pending = map[string]fsquota.Restored{}
	}
	p := m.repairs.pending[id]
	p.Checked += r.Checked
	p.Strays += r.Strays
	p.StrayBytes += r.StrayBytes
	if p.FirstStray == "" {
		p.FirstStray = r.FirstStray
	}
	m.repairs.pending[id] = p
	m.repairs.mu.Unlock()
	m.repairs.noted.signal()
}

// NoteRelease adds r, entries outside every volume just taken out of a
// volume's project quota (the quota watch's releases), to what
// TakeReleases returns next, and wakes the waiters of Repaired. They
// belong to no claim; the reporter counts them for the operator.
func (m *Manager) NoteRelease(r fsquota.Restored) {
	if r.Strays == 0 {
		return
	}
	m.repairs.mu.Lock()
	addRestored(&m.repairs.released, r)
	m.repairs.mu.Unlock()
	m.repairs.noted.signal()
}

// TakeReleases returns the releases noted since the last call, and
// forgets them.
func (m *Manager) TakeReleases() fsquota.Restored {
	m.repairs.mu.Lock()
	defer m.repairs.mu.Unlock()
	r := m.repairs.released
	m.repairs.released = fsquota.Restored{}
	return r
}

// Repaired returns a channel that is closed at the next NoteRepair. A
// reporter takes a new channel before each TakeRepairs, so that a repair
// noted meanwhile wakes it again.
func (m *Manager) Repaired() <-chan struct{} { return m.repairs.noted.wait() }

// TakeRepairs returns the repairs noted since the last call, by volume
// ID, and forgets them.
func (m *Manager) TakeRepairs() map[string]fsquota.Restored {
	m.repairs.mu.Lock()
	defer m.repairs.mu.Unlock()
	taken := maps.Clone(m.repairs.pending)
	clear(m.repairs.pending)
	return taken
}
