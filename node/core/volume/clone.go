package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/reflink"
)

// A volume can be made as a copy-on-write copy of a snapshot (a restore)
// or of another volume (a clone): Create with FromSnapshot or FromVolume.
// The copy is made as the snapshot's is (snapshot.go): one FICLONE of a
// block image, a tree copied file by file for a filesystem volume, into a
// volume that Create otherwise makes as always, with its own quota and
// project ID, between the same intent record and its removal, so a crash
// during the copy leaves a partial volume that Recover removes.
//
//   - The new volume has the source's mode (another is ErrInvalid) and at
//     least its size (a smaller one is ErrInvalid); a larger one is grown
//     after the copy, as Expand grows it: the image's new part allocated,
//     or the quota larger.
//   - The source is locked for the copy (in one Lock call with the new
//     volume), so it cannot be deleted or grown meanwhile: a Delete of it
//     waits for the copy to end. A source missing is ErrNotFound, with
//     nothing made.
//   - A copy shares its source's blocks, and the space accounting keeps
//     what it shares reserved for it (space.go), recorded on the volume in
//     copyXattr: it is what the copy needs in new blocks once everything
//     shared is overwritten.
//   - XFS charges a file's blocks to its project whether or not they are
//     shared, so a filesystem volume's quota counts its copied files in
//     full from the start (TestRestoredFilesystemVolumeQuotaHolds): the
//     limit holds as for any volume.

// ErrSmallerThanSource is matched, besides ErrInvalid, by the error of a
// copy asked to be smaller than its source, so that the CSI layer can
// answer it with the code the spec names for it (OUT_OF_RANGE).
var ErrSmallerThanSource = errors.New("smaller than its source")

// copySource is what a volume is copied from: a snapshot or a volume.
type copySource struct {
	snapshot, volume string
}

// FromSnapshot makes Create fill the new volume from snapshot id: same
// mode, at least the snapshot's SizeBytes.
func FromSnapshot(id string) CreateOption {
	return func(o *createOptions) { o.source = &copySource{snapshot: id} }
}

// FromVolume makes Create fill the new volume from volume id, a clone:
// same mode, at least its size.
func FromVolume(id string) CreateOption {
	return func(o *createOptions) { o.source = &copySource{volume: id} }
}

// String names the source as copyXattr records it.
func (c *copySource) String() string {
	if c.snapshot != "" {
		return "snapshot/" + c.snapshot
	}
	return "volume/" + c.volume
}

// lockKeys are the keys Create takes besides the new volume's: none
// without a source.
func (c *copySource) lockKeys() []string {
	switch {
	case c == nil:
		return nil
	case c.snapshot != "":
		return []string{snapshotKey(c.snapshot)}
	}
	return []string{c.volume}
}

// check validates the source for a new volume id with options o.
func (c *copySource) check(m *Manager, id string, o createOptions) error {
	if c == nil {
		return nil
	}
	if c.snapshot != "" {
		if err := ValidateSnapshotID(c.snapshot); err != nil {
			return err
		}
	} else if err := ValidateID(c.volume); err != nil {
		return err
	} else if c.volume == id {
		return fmt.Errorf("%w: a volume cannot be a clone of itself", ErrInvalid)
	}
	if o.rootDirMode != DefaultRootDirMode {
		return fmt.Errorf("%w: a copy takes its root directory's mode from its source; it cannot be given %s", ErrInvalid, FormatRootDirMode(o.rootDirMode))
	}
	return m.checkCopyOnWrite()
}

// matches checks that the existing volume cur, which has the mode and size
// asked for, was made from this source (nil: made from nothing asked).
func (c *copySource) matches(m *Manager, cur Info) error {
	if c == nil {
		return nil
	}
	from, _, err := readCopyXattr(m.dataPath(cur))
	if err != nil {
		return err
	}
	if from != c.String() {
		made := "made empty"
		if from != "" {
			made = "made from " + from
		}
		return fmt.Errorf("%w: volume %s exists, %s, not from %s", ErrExists, cur.ID, made, c)
	}
	return nil
}

// dataPath is the directory or image of the existing volume v.
func (m *Manager) dataPath(v Info) string {
	fsPath, imgPath := m.paths(v.ID)
	if v.Mode == Block {
		return imgPath
	}
	return fsPath
}

// copyFrom is a resolved source: its mode, size, where its data is, and
// what it holds (an estimate of what the copy will share).
type copyFrom struct {
	mode       Mode
	size, held int64
	path       string
}

// resolve finds the source's data. Callers hold its lock.
func (c *copySource) resolve(m *Manager) (copyFrom, error) {
	if c.snapshot != "" {
		s, err := m.snapshotDir(c.snapshot)
		if err != nil {
			return copyFrom{}, err
		}
		snap, err := m.currentSnapshot(s)
		if err != nil {
			return copyFrom{}, err
		}
		f := copyFrom{mode: snap.Mode, size: snap.SizeBytes, held: snap.ReservedBytes, path: s.Tree.FullPath()}
		if snap.Mode == Block {
			f.path = s.Image.FullPath()
		}
		return f, nil
	}
	vol, err := m.current(c.volume)
	if err != nil {
		return copyFrom{}, fmt.Errorf("source volume %s: %w", c.volume, err)
	}
	fsPath, imgPath := m.paths(vol.ID)
	held, err := m.heldBytes(vol, fsPath, imgPath)
	if err != nil {
		return copyFrom{}, err
	}
	return copyFrom{mode: vol.Mode, size: vol.CapacityBytes, held: held, path: m.dataPath(vol)}, nil
}

// createCopy makes volume id of the given mode and size as a copy of
// o.source. Callers hold both locks and run it within build, which undoes
// a failure.
func (m *Manager) createCopy(id string, mode Mode, size int64, o createOptions) error {
	src, err := o.source.resolve(m)
	if err != nil {
		return err
	}
	if src.mode != mode {
		return fmt.Errorf("%w: %s is a %v volume's data; a %v volume cannot be made from it", ErrInvalid, o.source, src.mode, mode)
	}
	if size < src.size {
		return fmt.Errorf("%w: %w: %s is %s; a volume made from it must be at least that large, not %s", ErrInvalid, ErrSmallerThanSource, o.source, formatBytes(src.size), formatBytes(size))
	}
	if mode == Block {
		return m.copyBlock(id, size, src, o)
	}
	return m.copyFilesystem(id, size, src, o)
}

// copyBlock clones the source image into the new image, then allocates
// the part beyond the source's size.
func (m *Manager) copyBlock(id string, size int64, src copyFrom, o createOptions) error {
	_, imgPath := m.paths(id)
	in, err := os.Open(src.path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", o.source, err)
	}
	defer in.Close()
	f, err := os.OpenFile(imgPath, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return classifySpace(fmt.Errorf("creating image file: %w", err))
	}
	defer f.Close()
	m.crashPoint("create:image")
	// The whole size is promised: the part beyond the source is
	// allocated, the shared part reserved (copyXattr).
	release, err := m.promise(id, size, o.overcommit)
	if err != nil {
		return err
	}
	defer release()
	if err := setCopyXattr(imgPath, o.source.String(), src.held); err != nil {
		return err
	}
	if err := reflink.Clone(f, in); err != nil {
		return classifySpace(err)
	}
	m.crashPoint("copy:cloned")
	if size > src.size {
		if err := fallocate(f, src.size, size-src.size); err != nil {
			return classifySpace(fmt.Errorf("allocating %d bytes beyond the copy: %w", size-src.size, err))
		}
	}
	if err := m.durable("create:image", f.Sync()); err != nil {
		return fmt.Errorf("syncing image file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing image file: %w", err)
	}
	return m.durable("create:volumes-dir", m.Data.Volumes.Sync())
}

// copyFilesystem makes the volume directory with its quota of the new
// size, as Create does, and copies the source's tree into it.
func (m *Manager) copyFilesystem(id string, size int64, src copyFrom, o createOptions) error {
	if err := m.createFilesystem(id, size, DefaultRootDirMode, o.overcommit); err != nil {
		return err
	}
	fsPath, _ := m.paths(id)
	// Reserved before the copy shares anything: the volume's quota is
	// empty, so its promise is its whole size until the copy fills it.
	if err := m.underSpace(id, func() error { return setCopyXattr(fsPath, o.source.String(), src.held) }); err != nil {
		return err
	}
	m.crashPoint("copy:mkdir")
	c, err := reflink.CopyTree(context.Background(), src.path, fsPath, reflink.TreeOptions{SkipXattr: isPlinthXattr})
	if err != nil {
		return classifySpace(err)
	}
	m.crashPoint("copy:tree")
	// What the copy shares may exceed what the source held when the room
	// was checked; the ledger counts it before the next check.
	if err := m.underSpace(id, func() error { return setCopyXattr(fsPath, o.source.String(), c.AllocatedBytes) }); err != nil {
		return err
	}
	// One syncfs for the whole tree, the quota and the xattrs.
	return m.durable("copy:tree", fsquota.Sync(fsPath))
}

// copyXattr records on a volume made as a copy (its directory or image)
// where it was copied from and how many bytes it shared with its source
// then: what the space accounting keeps reserved for it. Trusted, like
// capacityXattr, so a pod cannot change it; never copied to a copy.
const copyXattr = "trusted.plinth.copy"

type copyRecord struct {
	From        string `json:"from"`
	SharedBytes int64  `json:"sharedBytes"`
}

func setCopyXattr(path, from string, shared int64) error {
	b, err := json.Marshal(copyRecord{From: from, SharedBytes: shared})
	if err != nil {
		return err
	}
	if err := unix.Lsetxattr(path, copyXattr, b, 0); err != nil {
		return fmt.Errorf("recording the copy's source in xattr %s of %s: %w", copyXattr, path, err)
	}
	return nil
}

// readCopyXattr returns what setCopyXattr recorded on path, or "" and 0
// for a volume that is no copy.
func readCopyXattr(path string) (from string, shared int64, err error) {
	buf := make([]byte, 512)
	n, err := unix.Lgetxattr(path, copyXattr, buf)
	if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading xattr %s of %s: %w", copyXattr, path, err)
	}
	var r copyRecord
	if err := json.Unmarshal(buf[:n], &r); err != nil || r.SharedBytes < 0 {
		return "", 0, fmt.Errorf("xattr %s of %s holds %q, not a copy record", copyXattr, path, buf[:n])
	}
	return r.From, r.SharedBytes, nil
}

// isPlinthXattr names the xattrs Plinth keeps on volumes for itself,
// which describe the volume, not its data, and are not copied.
func isPlinthXattr(name string) bool { return strings.HasPrefix(name, "trusted.plinth.") }
