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
	// reclaimed is the room given back to volumes' project quotas,
	// by the volume whose quota it was (noteReclaimed).
	reclaimed map[string]Reclaimed
	noted     changes
}

// Reclaimed is room of a volume's project quota that entries not of the
// volume's tree had taken, given back when the quota watch or the audit
// took them out of the project (NoteRepair, NoteRelease, NoteReclaimed).
// The volume's user lost that room meanwhile: its writes within its size
// could fail with EDQUOT. Entries and Bytes are the sums over Sources.
type Reclaimed struct {
	Entries, Bytes int64
	// Sources says, one per source in the order they were noted, where
	// the entries came from and what each took. There is at most one
	// per volume of the node and one for outside every volume, so the
	// list is bounded by the node's volumes; the reporter shows a few.
	Sources []ReclaimedSource
}

// ReclaimedSource is one source of a volume's Reclaimed room. A process
// that may change project IDs moved the entries into the volume's
// project: the user of volume From (From's walk put them back into
// From's project), or, when From is "", a process using the node's
// filesystem outside every volume (an emptyDir, a container's layer).
type ReclaimedSource struct {
	From           string
	Entries, Bytes int64
	// First is one of the entries: within From, its path as the
	// repair named it (relative to the volume's directory, or its
	// name alone for the entry the watch saw written); outside every
	// volume, its absolute path.
	First string
}

// add adds c, room given back that source from had taken, to r.
func (r *Reclaimed) add(from string, c fsquota.Charge) {
	r.Entries += c.Entries
	r.Bytes += c.Bytes
	for i := range r.Sources {
		if s := &r.Sources[i]; s.From == from {
			s.Entries += c.Entries
			s.Bytes += c.Bytes
			if s.First == "" {
				s.First = c.First
			}
			return
		}
	}
	r.Sources = append(r.Sources, ReclaimedSource{From: from, Entries: c.Entries, Bytes: c.Bytes, First: c.First})
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
	p.Add(r)
	m.repairs.pending[id] = p
	m.repairs.mu.Unlock()
	m.noteReclaimed(id, r.From)
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
	m.repairs.released.Add(r)
	m.repairs.mu.Unlock()
	m.noteReclaimed("", r.From)
	m.repairs.noted.signal()
}

// NoteReclaimed notes the room given back to other volumes by a walk of
// volume from that the caller reports itself (the audit's walks: its
// Event goes to from's claim, and this to each other's), and wakes the
// waiters of Repaired. charged is the walk's fsquota.Restored.From.
func (m *Manager) NoteReclaimed(from string, charged map[uint32]fsquota.Charge) {
	if m.noteReclaimed(from, charged) {
		m.repairs.noted.signal()
	}
}

// noteReclaimed notes, for each project of charged that a volume other
// than volume from holds, the room given back to it, and reports whether
// there was any. A project no volume holds (freed meanwhile, or not a
// volume's) is nobody's to tell.
func (m *Manager) noteReclaimed(from string, charged map[uint32]fsquota.Charge) bool {
	if m.ProjectIDs == nil || len(charged) == 0 {
		return false
	}
	owners := map[uint32]string{}
	for pid := range charged {
		owner, held, err := m.ProjectIDs.Owner(pid)
		if err == nil && held && owner != from && ValidateID(owner) == nil {
			owners[pid] = owner
		}
	}
	m.repairs.mu.Lock()
	defer m.repairs.mu.Unlock()
	if m.repairs.reclaimed == nil {
		m.repairs.reclaimed = map[string]Reclaimed{}
	}
	for pid, owner := range owners {
		sum := m.repairs.reclaimed[owner]
		sum.add(from, charged[pid])
		m.repairs.reclaimed[owner] = sum
	}
	return len(owners) > 0
}

// TakeReclaimed returns the room given back to volumes' project quotas
// since the last call (Reclaimed), by the volume whose quota it was, and
// forgets it.
func (m *Manager) TakeReclaimed() map[string]Reclaimed {
	m.repairs.mu.Lock()
	defer m.repairs.mu.Unlock()
	taken := m.repairs.reclaimed
	m.repairs.reclaimed = nil
	return taken
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

// Repaired returns a channel that is closed at the next NoteRepair,
// NoteRelease or NoteReclaimed that noted something. A
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
