package volume

import (
	"fmt"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
)

// The promise ledger: what checkSpace needs to know of every volume and
// snapshot without measuring them again for each Create.
//
// Measuring the promise exactly (promisedBytes) costs a quota read or a
// stat and an xattr read per volume, so a node that made N volumes made
// them in time quadratic in N. Most of what it measures does not change
// between two Creates: the set of volumes, their kinds, their quota
// limits and image sizes, the bytes copies and snapshots reserve. Only
// what pods do moves: a filesystem volume's usage, a block image's holes.
// Both only ever make the promise smaller than its static bound:
//
//   - a filesystem volume with a quota promises its limit less its usage,
//     at most its limit;
//   - a block image's unallocated part is at most its size.
//
// The ledger keeps, per volume and snapshot, that bound (its entry), and
// their sums. A room check first asks whether the request fits even if
// every filesystem volume were empty and every image a hole; when it does,
// it fits under the exact measurement too, and no volume is read. Only
// when the bound does not decide (a node whose volumes hold data and whose
// free space is short) does the check measure exactly, as before.
//
// The ledger may never count less than the disk holds, or a Create could
// be promised room that is promised already. So every change that raises
// an entry (a quota set or raised, an image allocated or grown, a copy's
// or a snapshot's reserve written) is made under spaceMu and the entry is
// read back from disk before spaceMu is released (promise, underSpace);
// a change that lowers one (a volume or snapshot removed) reads its entry
// back once done, and until then the ledger only errs high. The ledger is
// built from disk at the first check after start and after Recover, so
// a crash, which loses it, loses nothing. A limit raised by hand, behind
// the engine's back, is counted from the next Recover on.
type promiseLedger struct {
	// built is false until the first check builds the ledger from disk.
	built bool
	// entries is each volume's (by ID) and snapshot's (by snapshotKey)
	// bound; an entry of zero is not kept.
	entries map[string]ledgerEntry
	// sum is the sum of entries.
	sum ledgerEntry
}

// ledgerEntry bounds what one volume or snapshot takes from new volumes:
// promised the most of Space.Promised, unallocated of Space.Unallocated.
type ledgerEntry struct {
	promised, unallocated int64
}

// set replaces key's entry with e and keeps the sum.
func (l *promiseLedger) set(key string, e ledgerEntry) {
	old := l.entries[key]
	l.sum.promised += e.promised - old.promised
	l.sum.unallocated += e.unallocated - old.unallocated
	if e == (ledgerEntry{}) {
		delete(l.entries, key)
		return
	}
	l.entries[key] = e
}

// ledgerLocked returns the ledger, built from disk if it is not. Callers
// hold spaceMu.
func (m *Manager) ledgerLocked() (*promiseLedger, error) {
	if m.ledger.built {
		return &m.ledger, nil
	}
	l := promiseLedger{entries: map[string]ledgerEntry{}}
	// Quarantined volumes keep their promise (promisedBytes); an entry
	// sums a volume's parts in both directories.
	ids := map[string]bool{}
	for _, dir := range []*localstorage.VolumesDirectory{&m.Data.Volumes, &m.Data.Quarantine} {
		entries, err := dir.List()
		if err != nil {
			return nil, fmt.Errorf("building the promise ledger: %w", err)
		}
		for _, e := range entries {
			if e.Kind == localstorage.VolumeBlock || e.Kind == localstorage.VolumeFilesystem {
				ids[e.ID] = true
			}
		}
	}
	for id := range ids {
		l.set(id, m.volumeBound(id))
	}
	recs, err := m.snapshotRecords()
	if err != nil {
		return nil, fmt.Errorf("building the promise ledger: %w", err)
	}
	for _, r := range recs {
		l.set(snapshotKey(r.id), ledgerEntry{promised: r.rec.ReservedBytes})
	}
	l.built = true
	m.ledger = l
	return &m.ledger, nil
}

// volumeBound reads volume id's entry from disk: over its directory and
// image, in use or quarantined, its copy reserve, its quota's limit where
// quotas are enforced, and its image's size. What promisedIn leaves out
// (a directory without quota, an unreadable copy record) is left out
// here too.
func (m *Manager) volumeBound(id string) ledgerEntry {
	var e ledgerEntry
	fsPath, imgPath := m.paths(id)
	qfsPath, qimgPath := m.quarantinePaths(id)
	for _, p := range []string{imgPath, qimgPath} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		e.unallocated += max(st.Size, 0)
		e.promised += copyReserve(p)
	}
	for _, p := range []string{fsPath, qfsPath} {
		if !isDir(p) {
			continue
		}
		e.promised += copyReserve(p)
		if !m.CapacityEnforced() {
			continue
		}
		if q, err := fsquota.GetQuota(p); err == nil {
			e.promised += int64(q.Limits.Bytes)
		}
	}
	return e
}

// ledgerKeyBound reads key's entry from disk: a volume's, or a
// snapshot's (its record's reserve) for a snapshotKey.
func (m *Manager) ledgerKeyBound(key string) ledgerEntry {
	if id, ok := snapshotIDOf(key); ok {
		s, err := m.snapshotDir(id)
		if err != nil {
			return ledgerEntry{}
		}
		rec, err := m.readSnapshotRecord(s)
		if err != nil || rec == nil {
			return ledgerEntry{}
		}
		return ledgerEntry{promised: rec.ReservedBytes}
	}
	if ValidateID(key) != nil {
		return ledgerEntry{}
	}
	return m.volumeBound(key)
}

// recountLocked reads key's entry back from disk into the ledger, if the
// ledger is built (if not, its build will read it). Callers hold spaceMu.
func (m *Manager) recountLocked(key string) {
	if m.ledger.built {
		m.ledger.set(key, m.ledgerKeyBound(key))
	}
}

// recount is recountLocked for a caller that does not hold spaceMu: after
// a change that lowered key's entry.
func (m *Manager) recount(key string) {
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	m.recountLocked(key)
}

// underSpace runs fn, which raises key's entry (a reserve written after
// the room for it was promised), under spaceMu, and reads the entry back
// before another check can run.
func (m *Manager) underSpace(key string, fn func() error) error {
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	defer m.recountLocked(key)
	return fn()
}

// forgetLedger drops the ledger; the next check builds it from disk.
// Recover calls it once it has repaired what a crash left.
func (m *Manager) forgetLedger() {
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	m.ledger = promiseLedger{}
}

// fitsBound says whether size more bytes fit under over-commit ratio r by
// the ledger's bound (see promiseLedger): if so, they fit under the exact
// measurement too. Callers hold spaceMu.
func (m *Manager) fitsBound(size int64, r Overcommit) (bool, error) {
	l, err := m.ledgerLocked()
	if err != nil {
		return false, err
	}
	used, reserve, err := m.shareUsed()
	if err != nil {
		return false, err
	}
	free, err := m.freeBytes()
	if err != nil {
		return false, err
	}
	s := Space{Free: free, Promised: l.sum.promised, Unallocated: l.sum.unallocated,
		ShareUsed: used, ShareReserve: max(reserve-used, 0)}
	return size <= s.room(r), nil
}
