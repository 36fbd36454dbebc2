package volume

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"source.plinth.dev/node/core/localstorage"
)

// Intent records (state/operations) and policy records (state/records) are
// both one small JSON file per volume, written atomically. These helpers are
// how either kind is named, read and removed, so the two cannot drift apart
// in how they treat damaged or missing files.

// stateFile returns the file of volume id in dir.
func stateFile(dir *localstorage.Directory, id string) (localstorage.File, error) {
	f, err := dir.ChildFile(id)
	if err != nil {
		return localstorage.File{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return f, nil
}

// readStateFile decodes f into v and reports whether f exists. The files are
// written atomically, so content that does not decode is no torn write but
// something foreign or corrupted: that is an error, never "absent", so no
// caller can mistake damaged state for no state and act on a guess.
func readStateFile(f localstorage.File, v any) (bool, error) {
	b, err := f.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", f.FullPath(), err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s is unreadable (%v); inspect and remove it by hand", f.FullPath(), err)
	}
	return true, nil
}

// removeStateFile deletes f, if it exists, and syncs dir so the removal is
// durable before the caller goes on.
func removeStateFile(dir *localstorage.Directory, f localstorage.File) error {
	if err := f.Remove(); err != nil {
		return err
	}
	return dir.Sync()
}
