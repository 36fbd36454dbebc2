package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
)

// RestoreProjectIDs gives every file and directory of filesystem volume id
// the volume's project ID again, and reports those that had another
// (fsquota.RestoreTree). A process using the volume can move files out of
// its project (chattr -p, or a restore tool that sets project IDs) and
// then write past the volume's size; after this walk those files count
// against the size again, and the next write over it fails.
//
// Block volumes, volumes without a project ID (made while quotas were not
// enforced) and nodes without enforced quotas have nothing to restore: the
// result is empty. A volume being created or deleted is ErrNotFound, as in
// Stat.
//
// The walk takes time proportional to the volume's files, so the volume's
// lock is held only to find its directory and project ID, never during
// the walk: publishing, stats and expansion go on meanwhile. A Delete
// meanwhile makes the walk fail or repair files that are being removed.
func (m *Manager) RestoreProjectIDs(ctx context.Context, id string, pace func(context.Context) error) (fsquota.Restored, error) {
	if err := ctx.Err(); err != nil {
		return fsquota.Restored{}, fmt.Errorf("restoring the project IDs of volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return fsquota.Restored{}, fmt.Errorf("restoring the project IDs of volume: %w", err)
	}
	dir, pid, err := m.projectOf(id)
	if err != nil || pid == 0 {
		return fsquota.Restored{}, err
	}
	r, err := fsquota.RestoreTree(ctx, dir, pid, pace)
	if err != nil {
		return r, fmt.Errorf("restoring the project IDs of volume %s: %w", id, err)
	}
	return r, nil
}

// DirProject is what ProjectOfDir finds for a directory of the data
// filesystem: the project ID its entries should carry, or must not.
type DirProject struct {
	// Path is the directory's path, as the kernel names the open
	// directory ("" when it could not be read).
	Path string
	// Volume is the filesystem volume the directory is in ("" if none),
	// and Project the ID every entry below it should carry (0: none to
	// restore, or not in a volume). InVolume is the directory's path
	// within the volume ("." for the volume's own directory): a repair of
	// one of its entries is reported by the entry's path in the volume,
	// the one its user knows.
	Volume   string
	InVolume string
	Project  uint32
	// Outside: the directory lies outside the engine's own trees
	// (enginePath) on a node enforcing quotas, where no entry may carry a
	// volume's project ID (FirstProjectID to LastProjectID). Release is
	// the ID such an entry gets instead: ShareProjectID within the node
	// share's trees, else 0 (releaseID says why).
	Outside bool
	Release uint32
}

// ProjectOfDir says which filesystem volume the directory open as dir
// (O_PATH will do) belongs to, and that volume's project ID: the ID every
// entry below dir should carry (fsquota.RestoreAt puts it back on one).
// When dir is in no filesystem volume (the volumes directory itself,
// where block images live, or outside it), or in one that has no project
// to restore (made while quotas were not enforced, or being created or
// deleted), Volume is "" or Project 0. When dir is outside Plinth's own
// directories, Outside says so, and Release is the ID an entry of dir
// carrying a volume's project gets instead (fsquota.ReleaseAt).
//
// It is how a watch of the data filesystem, which reports a change by
// its directory, finds the volume a file written belongs to. Where dir
// lies is read from the kernel's name of the open directory, a
// directory's one path: a rename moves it within its volume only (XFS
// refuses renames between projects).
func (m *Manager) ProjectOfDir(dir int) (DirProject, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(dir))
	if err != nil || m.ProjectIDs == nil {
		return DirProject{Path: p}, nil
	}
	d := DirProject{Path: p}
	d.Volume, d.InVolume = m.volumeOfDir(p)
	if d.Volume != "" {
		d.Project, err = m.entryProject(d.Volume)
		return d, err
	}
	if filepath.IsAbs(p) && !m.enginePath(p) {
		d.Outside, d.Release = true, m.releaseID(p)
	}
	return d, nil
}

// enginePath reports whether p lies in a tree of the data directory that
// only the engine writes: volumes, quarantined volumes (which keep their
// project IDs, to come back with their quota), snapshots and state. What
// lies there is never "outside every volume".
func (m *Manager) enginePath(p string) bool {
	for _, d := range m.engineTrees() {
		if localstorage.Within(p, d) {
			return true
		}
	}
	return false
}

// releaseID is the project ID an entry of directory dir, outside every
// volume, gets when it carries a volume's: ShareProjectID within the node
// share's trees, the ID the share's walks give everything there; else 0.
// A file outside both carrying a volume's ID got it from a process (the
// volumes' IDs are Plinth's, and Plinth gives them to nothing else), and
// which ID it had before is not recorded anywhere: 0, the ID the kernel
// gives a file whose directory passes none on, charges it to no quota,
// where the share's ID would charge the share for files its walks do not
// keep, and any other ID would be a quota Plinth does not know of.
func (m *Manager) releaseID(dir string) uint32 {
	if sh := m.share.set.Load(); sh != nil {
		for _, d := range sh.dirs {
			if localstorage.Within(dir, d) {
				return ShareProjectID
			}
		}
	}
	return 0
}

// volumeOfDir returns the ID of the filesystem volume whose directory is,
// or holds, the directory at path p (the kernel's name of an open
// directory), and p's path within that volume's directory; or "", "".
func (m *Manager) volumeOfDir(p string) (id, within string) {
	rel, ok := strings.CutPrefix(p, m.Data.Volumes.FullPath()+"/")
	if !ok {
		return "", ""
	}
	id, within, _ = strings.Cut(rel, "/")
	if ValidateID(id) != nil {
		// A removed directory's name ends in " (deleted)".
		return "", ""
	}
	if within == "" {
		within = "."
	}
	return id, within
}

// entryProject returns the project ID of filesystem volume id, or 0 when
// it has none to restore (a block volume, one made while quotas were not
// enforced, or one being created or deleted). It reads the ID on the
// volume's directory and that ID's claim (ownProject), the cheap way for
// every directory a watch reports.
func (m *Manager) entryProject(id string) (uint32, error) {
	unlock := m.locks.Lock(id)
	defer unlock()
	mode, dir, _, err := m.locate(id)
	if errors.Is(err, ErrNotFound) || (err == nil && mode != Filesystem) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("volume %s: %w", id, err)
	}
	carried, _, err := fsquota.ProjectID(dir)
	if err != nil {
		return 0, fmt.Errorf("volume %s: %w", id, err)
	}
	pid, _, err := m.ownProject(id, carried)
	return pid, err
}

// projectOf returns the directory of filesystem volume id and the project
// ID claimed for it, or pid 0 when it has none to restore.
func (m *Manager) projectOf(id string) (dir string, pid uint32, err error) {
	if m.ProjectIDs == nil {
		return "", 0, nil
	}
	unlock := m.locks.Lock(id)
	defer unlock()
	mode, dir, _, err := m.locate(id)
	if err != nil {
		return "", 0, fmt.Errorf("restoring the project IDs of volume %s: %w", id, err)
	}
	if mode != Filesystem {
		return "", 0, nil
	}
	pid, _, err = m.projectID(id)
	if err != nil {
		return "", 0, fmt.Errorf("restoring the project IDs of volume %s: %w", id, err)
	}
	return dir, pid, nil
}

// projectID returns the project ID claimed for volume id (ok false when
// none is: no allocator, or a volume made while quotas were not enforced).
// The claim, not the ID on the volume's directory, says which project is
// the volume's: a process using the volume can change the directory's.
func (m *Manager) projectID(id string) (pid uint32, ok bool, err error) {
	if m.ProjectIDs == nil {
		return 0, false, nil
	}
	pid, ok, err = m.ProjectIDs.Lookup(id)
	if err != nil {
		return 0, false, fmt.Errorf("looking up the project ID of volume %s: %w", id, err)
	}
	return pid, ok, nil
}

// ownProject returns the project ID of filesystem volume id, whose
// directory carries the ID carried (0: none): carried itself when its claim
// is id's, which costs one read of that claim (the common case); otherwise
// the ID claimed for id, found by projectID's slower walk of every claim,
// which only a directory whose ID was changed, or that has none on a node
// enforcing quotas, needs. ok is false when id has no claim.
func (m *Manager) ownProject(id string, carried uint32) (pid uint32, ok bool, err error) {
	if m.ProjectIDs == nil {
		return 0, false, nil
	}
	if carried != 0 {
		owner, held, err := m.ProjectIDs.Owner(carried)
		if err != nil {
			return 0, false, fmt.Errorf("reading the project ID claim of volume %s: %w", id, err)
		}
		if held && owner == id {
			return carried, true, nil
		}
	} else if !m.CapacityEnforced() {
		// Volumes made without enforced quotas claim no ID.
		return 0, false, nil
	}
	return m.projectID(id)
}

// quotaOf reads the quota of filesystem volume id, whose directory is
// fsPath: its own project's (ownProject) where it has a claim, else that
// of the ID its directory carries.
func (m *Manager) quotaOf(id, fsPath string) (*fsquota.Quota, error) {
	q, err := fsquota.GetQuota(fsPath)
	if err != nil && !errors.Is(err, fsquota.ErrNoQuota) {
		return nil, err
	}
	var carried uint32
	if q != nil {
		carried = q.ProjectID
	}
	pid, ok, oerr := m.ownProject(id, carried)
	switch {
	case oerr != nil:
		return nil, oerr
	case !ok || pid == carried:
		return q, err
	}
	return fsquota.ProjectQuota(fsPath, pid)
}
