package localstorage

import (
	"fmt"
	"os"
	"path/filepath"
)

// SnapshotsDirectory is data/snapshots/: one SnapshotDirectory per
// snapshot, named by its ID.
type SnapshotsDirectory struct {
	Directory
}

// SnapshotDirectory is snapshots/<id>/, one snapshot of a volume. Its
// record says what the snapshot is and whether it is complete; its data is
// the image of a block volume or the tree of a filesystem volume, never
// both. The volume code creates it (os.Mkdir on FullPath, then the record)
// and decides what a directory without a complete record is; MkdirAll is
// not the way to make one.
type SnapshotDirectory struct {
	Directory
	// Record is the snapshot's state, written atomically.
	Record File `file:"record" mode:"0600"`
	// Image is a block volume's image, cloned.
	Image File `file:"image" mode:"0600"`
	// Tree is a filesystem volume's files, cloned one by one.
	Tree Directory `dir:"tree" mode:"0700"`
	id   string
}

// ID is the snapshot's ID.
func (s *SnapshotDirectory) ID() string { return s.id }

// Snapshot returns the placed directory of snapshot id, after checking id
// with ValidateSnapshotID. Whether it exists is the caller's to find out.
func (d *SnapshotsDirectory) Snapshot(id string) (SnapshotDirectory, error) {
	if err := ValidateSnapshotID(id); err != nil {
		return SnapshotDirectory{}, err
	}
	s := SnapshotDirectory{id: id}
	if err := placeAt(&s, filepath.Join(d.FullPath(), id), 0o700); err != nil {
		return SnapshotDirectory{}, fmt.Errorf("placing snapshot %s: %w", id, err)
	}
	return s, nil
}

// SnapshotEntry is one entry of snapshots/.
type SnapshotEntry struct {
	// Name is the entry's file name.
	Name string
	// ID is the snapshot ID, "" when the entry is no snapshot of ours.
	ID string
	// Reason says why an entry is not a snapshot (a wrong name, not a
	// directory); such entries are reported, never removed.
	Reason string
}

// List returns every entry of snapshots/, sorted by name, classified
// without following symlinks.
func (d *SnapshotsDirectory) List() ([]SnapshotEntry, error) {
	des, err := os.ReadDir(d.FullPath())
	if err != nil {
		return nil, fmt.Errorf("listing snapshots in %s: %w", d.FullPath(), err)
	}
	out := make([]SnapshotEntry, 0, len(des))
	for _, de := range des {
		e := SnapshotEntry{Name: de.Name()}
		switch err := ValidateSnapshotID(de.Name()); {
		case err != nil:
			e.Reason = err.Error()
		case !de.Type().IsDir():
			e.Reason = fmt.Sprintf("snapshot ID name but a %s, not a directory", describeType(de.Type()))
		default:
			e.ID = de.Name()
		}
		out = append(out, e)
	}
	return out, nil
}
