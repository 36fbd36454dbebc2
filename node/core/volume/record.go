package volume

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"source.plinth.dev/node/core/localstorage"
)

// ReclaimPolicy is what the volume's consumer (for the provisioner, its PV)
// said should happen to the data once nobody claims it any more. The volume
// layer does not act on it; it only remembers it, because the consumer's
// object can disappear (an administrator deletes a Retain PV by hand) and
// then the volume on disk is all that is left to decide by.
type ReclaimPolicy string

const (
	// ReclaimUnrecorded: no policy was ever recorded for the volume, so
	// no consumer object was ever seen for it. For the provisioner that
	// means the process stopped between creating the volume and its PV.
	ReclaimUnrecorded ReclaimPolicy = ""
	// ReclaimDelete: the data may be removed once it is released.
	ReclaimDelete ReclaimPolicy = "delete"
	// ReclaimRetain: the data must be kept until an operator removes it.
	ReclaimRetain ReclaimPolicy = "retain"
)

// ParseReclaimPolicy checks a recorded or requested policy.
func ParseReclaimPolicy(s string) (ReclaimPolicy, error) {
	switch p := ReclaimPolicy(s); p {
	case ReclaimDelete, ReclaimRetain:
		return p, nil
	}
	return "", fmt.Errorf("%w: unknown reclaim policy %q (want delete or retain)", ErrInvalid, s)
}

// record is the per-volume record in state/records/<id>. It outlives single
// operations (unlike an intent) and is removed together with the volume.
type record struct {
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy"`
	// QuarantinedAt is when the volume was moved into quarantine
	// (quarantine.go); it means nothing while the volume is elsewhere.
	QuarantinedAt time.Time `json:"quarantinedAt,omitzero"`
}

func (m *Manager) recordFile(id string) (localstorage.File, error) {
	return stateFile(&m.Data.State.Records, id)
}

// readRecord returns the record of id, or nil if there is none. A damaged
// record is an error: callers must then treat the volume as not deletable.
func (m *Manager) readRecord(id string) (*record, error) {
	f, err := m.recordFile(id)
	if err != nil {
		return nil, err
	}
	var rec record
	found, err := readStateFile(f, &rec)
	if err != nil {
		return nil, fmt.Errorf("record of volume %s: %w", id, err)
	}
	if !found {
		return nil, nil
	}
	if _, err := ParseReclaimPolicy(string(rec.ReclaimPolicy)); err != nil {
		return nil, fmt.Errorf("record %s of volume %s: %w; inspect and remove it by hand", f.FullPath(), id, err)
	}
	return &rec, nil
}

// removeRecord deletes the record of id, if any. Callers hold id's lock.
func (m *Manager) removeRecord(id string) error {
	f, err := m.recordFile(id)
	if err != nil {
		return err
	}
	if err := m.durable("remove-record", removeStateFile(&m.Data.State.Records, f)); err != nil {
		return fmt.Errorf("removing record of volume %s: %w", id, err)
	}
	return nil
}

// SetReclaimPolicy records the reclaim policy of volume id, durably and
// atomically (a crash leaves the old record or the new one). It writes only
// when the policy changes, so callers may call it on every observation of
// the consumer's object. The volume must exist and be complete: a volume
// being created or deleted gets ErrNotFound, so no record can outlive the
// volume it describes.
func (m *Manager) SetReclaimPolicy(ctx context.Context, id string, p ReclaimPolicy) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("recording reclaim policy of volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("recording reclaim policy: %w", err)
	}
	if _, err := ParseReclaimPolicy(string(p)); err != nil {
		return fmt.Errorf("recording reclaim policy of volume %s: %w", id, err)
	}
	unlock := m.locks.Lock(id)
	defer unlock()
	if err := m.settleDebt(); err != nil {
		return fmt.Errorf("recording reclaim policy of volume %s: %w", id, err)
	}
	in, err := m.readIntent(id)
	if err != nil {
		return fmt.Errorf("recording reclaim policy of volume %s: %w", id, err)
	}
	fsPath, imgPath := m.paths(id)
	if (in != nil && in.Op != OpExpand) || (!isDir(fsPath) && !exists(imgPath)) {
		return fmt.Errorf("recording reclaim policy of volume %s: %w", id, ErrNotFound)
	}
	cur, err := m.readRecord(id)
	if err == nil && cur != nil && cur.ReclaimPolicy == p {
		return nil
	}
	// An unreadable record is overwritten: the caller states the policy
	// now, which is better knowledge than a record nobody can read.
	b, err := json.Marshal(record{ReclaimPolicy: p})
	if err != nil {
		return fmt.Errorf("encoding record of volume %s: %w", id, err)
	}
	f, err := m.recordFile(id)
	if err != nil {
		return err
	}
	defer m.changes.signal()
	if err := m.durable("record", f.WriteAtomic(b, 0o600)); err != nil {
		return fmt.Errorf("recording reclaim policy of volume %s: %w", id, err)
	}
	return nil
}

// ReclaimPolicy returns the recorded reclaim policy of volume id, or
// ReclaimUnrecorded when none was recorded. An unreadable record is an
// error, never ReclaimUnrecorded, so a damaged record cannot make retained
// data look deletable.
func (m *Manager) ReclaimPolicy(ctx context.Context, id string) (ReclaimPolicy, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("reading reclaim policy of volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return "", fmt.Errorf("reading reclaim policy: %w", err)
	}
	unlock := m.locks.Lock(id)
	defer unlock()
	rec, err := m.readRecord(id)
	if err != nil {
		return "", err
	}
	if rec == nil {
		return ReclaimUnrecorded, nil
	}
	return rec.ReclaimPolicy, nil
}
