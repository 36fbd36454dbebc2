package volume

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"source.plinth.dev/node/core/localstorage"
)

// Quarantine is where a volume goes when its consumer's object vanished
// without releasing it (for the provisioner: a Delete PV gone without
// being Released here, which an etcd restore, a rebuilt cluster or a hand
// deletion all look like). It is data/quarantine/, on the data
// filesystem, in the layout of data/volumes/: a volume moves in and out by
// one rename, so it keeps its files, its project ID and its quota, and its
// room stays counted (Space). Its record says since when it is there; the
// caller removes it once its retention period is over (DeleteQuarantined)
// or moves it back when its object reappears (Restore, and Create of the
// same ID).
//
// Each move is crash-safe without an intent: the record is written first,
// then the one rename, then both directories are synced. A crash before
// the rename leaves the volume where it was (the time in its record means
// nothing outside the quarantine, and the next Quarantine writes it anew);
// a crash after it leaves a quarantined volume with its time.

// QuarantinedVolume is one volume in quarantine.
type QuarantinedVolume struct {
	ID   string
	Mode Mode
	// Since is when it was quarantined; zero when no readable record
	// says (then the caller must not remove it on age).
	Since time.Time
	// Path is its directory or image, for whoever inspects it.
	Path string
}

// quarantinePaths returns where volume id's directory and image would be
// in quarantine. The ID must be valid.
func (m *Manager) quarantinePaths(id string) (fsPath, imgPath string) {
	dir, err := m.Data.Quarantine.Filesystem(id)
	if err != nil {
		panic(fmt.Sprintf("volume: quarantine paths of unvalidated ID %q: %v", id, err))
	}
	img, err := m.Data.Quarantine.Block(id)
	if err != nil {
		panic(fmt.Sprintf("volume: quarantine paths of unvalidated ID %q: %v", id, err))
	}
	return dir.FullPath(), img.FullPath()
}

// Quarantine moves volume id, complete and unused, into quarantine, noting
// now as its time there. The volume must have a record (SetReclaimPolicy):
// only a volume whose consumer was seen can have vanished. It refuses a
// volume in use (ErrInUse) or being created or deleted, and one whose ID
// is in quarantine already (ErrExists).
func (m *Manager) Quarantine(ctx context.Context, id string, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("quarantining volume: %w", err)
	}
	defer m.changes.signal()
	unlock := m.locks.Lock(id)
	defer unlock()
	if err := m.settleDebt(); err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	in, err := m.readIntent(id)
	if err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	if in != nil {
		return fmt.Errorf("quarantining volume %s: %w: a %s is in progress", id, ErrInUse, in.Op)
	}
	fsPath, imgPath := m.paths(id)
	qfs, qimg := m.quarantinePaths(id)
	src, dst := fsPath, qfs
	switch {
	case isDir(fsPath):
		if err := refuseNestedMounts(fsPath); err != nil {
			return fmt.Errorf("quarantining volume %s: %w", id, err)
		}
	case isRegular(imgPath):
		src, dst = imgPath, qimg
	default:
		return fmt.Errorf("quarantining volume %s: %w", id, ErrNotFound)
	}
	if err := refuseInUse(fsPath, imgPath); err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	if exists(qfs) || exists(qimg) {
		return fmt.Errorf("quarantining volume %s: %w: it is in quarantine already", id, ErrExists)
	}
	rec, err := m.readRecord(id)
	if err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	if rec == nil {
		return fmt.Errorf("quarantining volume %s: %w: it has no record", id, ErrInvalid)
	}
	rec.QuarantinedAt = now.UTC()
	if err := m.writeRecord(id, rec); err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	m.crashPoint("quarantine:recorded")
	if err := m.move(src, dst); err != nil {
		return fmt.Errorf("quarantining volume %s: %w", id, err)
	}
	return nil
}

// Restore moves volume id back from quarantine, untouched: same files,
// project ID and quota. It fails with ErrNotFound when id is not in
// quarantine, and with ErrExists when a volume id exists besides.
func (m *Manager) Restore(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restoring volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("restoring volume: %w", err)
	}
	defer m.changes.signal()
	unlock := m.locks.Lock(id)
	defer unlock()
	if err := m.settleDebt(); err != nil {
		return fmt.Errorf("restoring volume %s: %w", id, err)
	}
	restored, err := m.restore(id)
	if err != nil {
		return err
	}
	if !restored {
		return fmt.Errorf("restoring volume %s: %w in quarantine", id, ErrNotFound)
	}
	return nil
}

// restore moves volume id back from quarantine if it is there, and says
// whether it was. Callers hold id's lock.
func (m *Manager) restore(id string) (bool, error) {
	qfs, qimg := m.quarantinePaths(id)
	fsPath, imgPath := m.paths(id)
	src, dst := qfs, fsPath
	switch {
	case isDir(qfs):
	case isRegular(qimg):
		src, dst = qimg, imgPath
	default:
		return false, nil
	}
	if exists(fsPath) || exists(imgPath) {
		return false, fmt.Errorf("restoring volume %s: %w: a volume of that ID exists besides the one in quarantine (%s); one of them must be removed by hand", id, ErrExists, src)
	}
	if err := m.move(src, dst); err != nil {
		return false, fmt.Errorf("restoring volume %s: %w", id, err)
	}
	// The time in the record means nothing outside the quarantine; it is
	// cleared for whoever reads the record, and a failure to do so
	// changes nothing else.
	if rec, err := m.readRecord(id); err == nil && rec != nil && !rec.QuarantinedAt.IsZero() {
		rec.QuarantinedAt = time.Time{}
		if err := m.writeRecord(id, rec); err != nil {
			return true, fmt.Errorf("restoring volume %s: %w", id, err)
		}
	}
	return true, nil
}

// Quarantined lists the volumes in quarantine, sorted by ID. Like List it
// takes no locks. Entries that are no volume are left out: nothing acts
// on them.
func (m *Manager) Quarantined(ctx context.Context) ([]QuarantinedVolume, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing quarantined volumes: %w", err)
	}
	entries, err := m.Data.Quarantine.List()
	if err != nil {
		return nil, fmt.Errorf("listing quarantined volumes: %w", err)
	}
	var out []QuarantinedVolume
	for _, e := range entries {
		q := QuarantinedVolume{ID: e.ID}
		qfs, qimg := "", ""
		switch e.Kind {
		case localstorage.VolumeFilesystem:
			qfs, _ = m.quarantinePaths(e.ID)
			q.Mode, q.Path = Filesystem, qfs
		case localstorage.VolumeBlock:
			_, qimg = m.quarantinePaths(e.ID)
			q.Mode, q.Path = Block, qimg
		default:
			continue
		}
		if rec, err := m.readRecord(e.ID); err == nil && rec != nil {
			q.Since = rec.QuarantinedAt
		}
		out = append(out, q)
	}
	return out, nil
}

// DeleteQuarantined removes volume id from quarantine for good: it moves
// it back and deletes it as Delete does (recorded, resumable, refusing a
// volume in use). A crash in between leaves the volume among the others,
// with its record: its caller finds it unreferenced again and quarantines
// it anew, so a crash can only make it stay longer. A volume not in
// quarantine is left alone (and nil returned).
func (m *Manager) DeleteQuarantined(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deleting quarantined volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("deleting quarantined volume: %w", err)
	}
	unlock := m.locks.Lock(id)
	err := m.settleDebt()
	restored := false
	if err == nil {
		restored, err = m.restore(id)
	}
	unlock()
	if err != nil || !restored {
		return err
	}
	m.crashPoint("quarantine:restored-for-delete")
	return m.Delete(ctx, id)
}

// move renames src to dst within the data filesystem and syncs both
// parent directories.
func (m *Manager) move(src, dst string) error {
	// Under spaceMu, so that the ledger's build, which lists volumes/
	// and quarantine/ one after the other, finds the volume in one of them.
	m.spaceMu.Lock()
	err := os.Rename(src, dst)
	m.spaceMu.Unlock()
	if err != nil {
		return m.durable("quarantine:rename", fmt.Errorf("moving %s to %s: %w", src, dst, err))
	}
	if err := m.durable("quarantine:dir", m.Data.Quarantine.Sync()); err != nil {
		return err
	}
	return m.durable("volumes-dir", m.Data.Volumes.Sync())
}

// writeRecord writes rec as id's record, durably. Callers hold id's lock.
func (m *Manager) writeRecord(id string, rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding record of volume %s: %w", id, err)
	}
	f, err := m.recordFile(id)
	if err != nil {
		return err
	}
	if err := m.durable("record", f.WriteAtomic(b, 0o600)); err != nil {
		return fmt.Errorf("writing record of volume %s: %w", id, err)
	}
	return nil
}
