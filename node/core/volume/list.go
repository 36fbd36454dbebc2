package volume

import (
	"context"
	"fmt"
	"sort"

	"source.plinth.dev/node/core/localstorage"
)

// Entry is one volume (or leftover) found by List.
type Entry struct {
	// Info is the volume; Mode and CapacityBytes are zero when unknown.
	Info
	// Name is the entry's file name in volumes/ ("" when only an intent
	// record exists).
	Name string
	// Pending is the operation that is in flight or was interrupted
	// ("" for a complete volume). Recover settles interrupted ones.
	Pending Op
	// Problem says why the entry is not a usable volume (a foreign file,
	// an unreadable quota). Such entries are reported, never removed:
	// what is not provably ours is left to the operator.
	Problem string
}

// List returns every volume and every leftover in the volumes directory
// and the intent records, sorted by name, for the startup reconciliation
// of the controllers. It takes no locks: it is a snapshot, and an entry
// may change while the caller looks at it.
func (m *Manager) List(ctx context.Context) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	raw, err := m.Data.Volumes.List()
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	pending, err := m.pendingOps()
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	var out []Entry
	seen := make(map[string]bool)
	for _, e := range raw {
		if e.Kind == localstorage.VolumeUnknown {
			out = append(out, Entry{Name: e.Name, Problem: e.Reason})
			continue
		}
		ent := Entry{Name: e.Name, Info: Info{ID: e.ID}, Pending: pending[e.ID]}
		seen[e.ID] = true
		info, err := m.describe(e.ID)
		if err != nil {
			ent.Problem = err.Error()
			if e.Kind == localstorage.VolumeBlock {
				ent.Mode = Block
			} else {
				ent.Mode = Filesystem
			}
		} else {
			ent.Info = info
		}
		out = append(out, ent)
	}
	for id, op := range pending {
		if !seen[id] {
			out = append(out, Entry{Info: Info{ID: id}, Pending: op})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// pendingOps maps volume IDs to the operation of their intent record.
func (m *Manager) pendingOps() (map[string]Op, error) {
	names, err := m.Data.State.Operations.Entries()
	if err != nil {
		return nil, err
	}
	ops := make(map[string]Op, len(names))
	for _, id := range names {
		if ValidateID(id) != nil {
			continue
		}
		in, err := m.readIntent(id)
		if err != nil || in == nil {
			ops[id] = "unreadable"
			continue
		}
		ops[id] = in.Op
	}
	return ops, nil
}

// Recovery is one repair Recover made (or failed to make).
type Recovery struct {
	ID string
	// What was done, in words for a log line.
	Action string
	Err    error
}

// Recover settles every interrupted operation (undoing interrupted
// Creates, completing Deletes, trimming Expands, removing snapshots left
// incomplete, whose Recovery.ID is "snapshot/<id>") and releases project IDs
// claimed for volumes that no longer exist. Call it once at start, before
// serving requests; it is also safe while requests are served, because it
// takes each volume's lock. It returns what it did so the caller can log
// it; a failed repair is in the list with its error and does not stop the
// others. It first syncs the whole data filesystem and fails, changing
// nothing, if that fails.
func (m *Manager) Recover(ctx context.Context) ([]Recovery, error) {
	defer m.changes.signal()
	// What Recover repaired is read from disk by the next room check.
	defer m.forgetLedger()
	// An earlier process may have died owing a sync (see durable):
	// what it left must be durable before anything is judged by it.
	if err := m.syncFilesystem(); err != nil {
		return nil, fmt.Errorf("recovering volumes: making what earlier processes left durable: %w", err)
	}
	names, err := m.Data.State.Operations.Entries()
	if err != nil {
		return nil, fmt.Errorf("recovering volumes: %w", err)
	}
	var done []Recovery
	for _, id := range names {
		if err := ctx.Err(); err != nil {
			return done, fmt.Errorf("recovering volumes: %w", err)
		}
		if ValidateID(id) != nil {
			continue
		}
		if r, ok := m.recoverOne(id); ok {
			done = append(done, r)
		}
	}
	snaps, err := m.recoverSnapshots(ctx)
	done = append(done, snaps...)
	if err != nil {
		return done, fmt.Errorf("recovering snapshots: %w", err)
	}
	if m.ProjectIDs == nil {
		return done, nil
	}
	claims, err := m.ProjectIDs.Claimed()
	if err != nil {
		return done, fmt.Errorf("recovering volumes: %w", err)
	}
	for pid, owner := range claims {
		if ValidateID(owner) != nil {
			continue // not a claim of ours
		}
		if r, ok := m.releaseStrayClaim(pid, owner); ok {
			done = append(done, r)
		}
	}
	return done, nil
}

func (m *Manager) recoverOne(id string) (Recovery, bool) {
	unlock := m.locks.Lock(id)
	defer unlock()
	in, err := m.readIntent(id)
	if err != nil {
		return Recovery{ID: id, Action: "reading intent record", Err: err}, true
	}
	if in == nil {
		return Recovery{}, false
	}
	action := map[Op]string{
		OpCreate: "removed a partially created volume",
		OpDelete: "completed an interrupted deletion",
		OpExpand: "trimmed an interrupted expansion",
	}[in.Op]
	if err := m.finish(id, in); err != nil {
		return Recovery{ID: id, Action: action, Err: err}, true
	}
	return Recovery{ID: id, Action: action}, true
}

func (m *Manager) releaseStrayClaim(pid uint32, owner string) (Recovery, bool) {
	unlock := m.locks.Lock(owner)
	defer unlock()
	fsPath, _ := m.paths(owner)
	qfs, _ := m.quarantinePaths(owner) // a quarantined volume keeps its ID
	if in, err := m.readIntent(owner); err != nil || in != nil || isDir(fsPath) || isDir(qfs) {
		return Recovery{}, false
	}
	r := Recovery{ID: owner, Action: fmt.Sprintf("released project ID %d of a volume that no longer exists", pid)}
	if err := m.ProjectIDs.Release(pid, owner); err != nil {
		r.Err = err
	}
	return r, true
}
