package volume

import (
	"encoding/json"
	"fmt"

	"source.plinth.dev/node/core/localstorage"
)

// Op names an operation that writes an intent record.
type Op string

const (
	OpCreate Op = "create"
	OpDelete Op = "delete"
	OpExpand Op = "expand"
)

// intent is the record of an operation in flight, stored atomically in
// state/operations/<id> before the operation touches volumes/ and removed
// after its last step. Its presence after a crash is what makes a partial
// volume recognisable: without a record, an entry in volumes/ is complete.
type intent struct {
	Op   Op     `json:"op"`
	Mode string `json:"mode"`
	// Bytes is the (aligned) size being created or grown to.
	Bytes int64 `json:"bytes"`
	// PreviousBytes is the size before an expansion: an interrupted
	// expansion is trimmed back to the image's size, never below this.
	PreviousBytes int64 `json:"previousBytes,omitempty"`
	// ProjectID is the filesystem volume's project ID when known, so an
	// interrupted deletion can release it after the directory is gone.
	ProjectID uint32 `json:"projectID,omitempty"`
}

func (m *Manager) intentFile(id string) (localstorage.File, error) {
	return stateFile(&m.Data.State.Operations, id)
}

// readIntent returns the intent record of id, or nil if there is none.
func (m *Manager) readIntent(id string) (*intent, error) {
	f, err := m.intentFile(id)
	if err != nil {
		return nil, err
	}
	var in intent
	found, err := readStateFile(f, &in)
	if err != nil {
		return nil, fmt.Errorf("intent record of volume %s: %w", id, err)
	}
	if !found {
		return nil, nil
	}
	switch in.Op {
	case OpCreate, OpDelete, OpExpand:
	default:
		return nil, fmt.Errorf("intent record %s of volume %s has unknown operation %q; inspect and remove it by hand", f.FullPath(), id, in.Op)
	}
	return &in, nil
}

func (m *Manager) writeIntent(id string, in intent) error {
	f, err := m.intentFile(id)
	if err != nil {
		return err
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding intent record of volume %s: %w", id, err)
	}
	if err := m.durable("intent", f.WriteAtomic(b, 0o600)); err != nil {
		return fmt.Errorf("recording intent to %s volume %s: %w", in.Op, id, err)
	}
	return nil
}

func (m *Manager) clearIntent(id string) error {
	f, err := m.intentFile(id)
	if err != nil {
		return err
	}
	if err := m.durable("clear-intent", removeStateFile(&m.Data.State.Operations, f)); err != nil {
		return fmt.Errorf("removing intent record of volume %s: %w", id, err)
	}
	return nil
}

// finish brings id out of the interrupted operation in (caller holds the
// lock): an interrupted Create is undone (the caller never learned it
// succeeded, so nothing can depend on it), an interrupted Delete is
// completed, an interrupted Expand is trimmed to the size it reached.
func (m *Manager) finish(id string, in *intent) error {
	switch in.Op {
	case OpCreate, OpDelete:
		// A create in progress was never handed out, so its volume
		// cannot be in use; if it is, the create finished and was
		// handed out, and its record outlived it (a power loss undid
		// the record's removal, or a bug): never roll it back then.
		if in.Op == OpCreate {
			if err := refuseInUse(m.paths(id)); err != nil {
				return fmt.Errorf("finishing interrupted create of volume %s: %w", id, err)
			}
		}
		// An interrupted operation may hold a project ID claim that no
		// directory names (see Delete): look it up.
		if err := m.remove(id, in.ProjectID, true); err != nil {
			return fmt.Errorf("finishing interrupted %s of volume %s: %w", in.Op, id, err)
		}
	case OpExpand:
		if err := m.trimBlock(id); err != nil {
			return fmt.Errorf("finishing interrupted expansion of volume %s: %w", id, err)
		}
	}
	return m.clearIntent(id)
}
