package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo"
)

// Delete removes volume id: its data, its quota and its project ID. It is
// idempotent (deleting a missing volume succeeds) and resumable: the
// deletion is recorded first, so a crash halfway leaves a record that the
// next Delete or Recover completes, and never a volume that looks whole
// but has lost part of its files.
//
// Delete refuses (and removes nothing) when the volume is still in use
// (ErrInUse: its directory is bind-mounted somewhere, or its image is
// attached to a loop device), and when something is mounted inside the
// volume directory, because removing files there would reach into another
// filesystem.
func (m *Manager) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("deleting volume: %w", err)
	}
	defer m.changes.signal()
	unlock := m.locks.Lock(id)
	defer unlock()
	if err := m.settleDebt(); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}

	in, err := m.readIntent(id)
	if err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	fsPath, imgPath := m.paths(id)
	fsExists, imgExists := isDir(fsPath), exists(imgPath)
	if !fsExists && !imgExists && in == nil {
		return nil
	}
	var pid uint32
	if in != nil {
		pid = in.ProjectID
	}
	// Also a volume whose create record is still there: it was never
	// handed out, unless the record outlived the create (see finish).
	if err := refuseInUse(fsPath, imgPath); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	if fsExists {
		if err := refuseNestedMounts(fsPath); err != nil {
			return fmt.Errorf("deleting volume %s: %w", id, err)
		}
		if q, err := fsquota.GetQuota(fsPath); err == nil {
			pid = q.ProjectID
		} else if errors.Is(err, fsquota.ErrNoQuota) && pid == 0 {
			// A directory whose ID a process using the volume took
			// off (chattr -p 0): the volume's claimed ID is still its
			// own, with limits to clear and a claim to release.
			if claimed, ok, err := m.ownProject(id, 0); err != nil {
				return fmt.Errorf("deleting volume %s: %w", id, err)
			} else if ok {
				pid = claimed
			}
		}
	}
	if in == nil || in.Op != OpDelete || in.ProjectID != pid {
		if err := m.writeIntent(id, intent{Op: OpDelete, ProjectID: pid}); err != nil {
			return fmt.Errorf("deleting volume %s: %w", id, err)
		}
	}
	// An interrupted Create may have claimed a project ID it never put on
	// the directory, and an interrupted Delete of such a volume recorded
	// no ID; only after an interruption is the (slow) claim lookup needed.
	m.crashPoint("delete:intent")
	if err := m.remove(id, pid, in != nil); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	if err := m.clearIntent(id); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	m.releaseToShare()
	return nil
}

// paths returns where volume id's directory and image would be. The ID must
// be valid.
func (m *Manager) paths(id string) (fsPath, imgPath string) {
	dir, err := m.Data.Volumes.Filesystem(id)
	if err != nil {
		panic(fmt.Sprintf("volume: paths of unvalidated ID %q: %v", id, err))
	}
	img, err := m.Data.Volumes.Block(id)
	if err != nil {
		panic(fmt.Sprintf("volume: paths of unvalidated ID %q: %v", id, err))
	}
	return dir.FullPath(), img.FullPath()
}

// remove deletes whatever exists of volume id and releases its project ID
// (pid, or the one on its directory, or with lookupPID the one claimed in
// its name). Callers hold id's lock and have recorded an intent.
func (m *Manager) remove(id string, pid uint32, lookupPID bool) error {
	defer m.recount(id)
	fsPath, imgPath := m.paths(id)
	if isDir(fsPath) {
		var err error
		if pid, lookupPID, err = m.removeDirectory(id, fsPath, pid, lookupPID); err != nil {
			return err
		}
	}
	if exists(imgPath) {
		if err := os.Remove(imgPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing image file: %w", err)
		}
		if err := m.durable("delete:volumes-dir", m.Data.Volumes.Sync()); err != nil {
			return err
		}
	}
	m.crashPoint("delete:data")
	// The record goes with the data (never before it: a record that
	// vanished first would make retained data look like a crash leftover).
	if err := m.removeRecord(id); err != nil {
		return err
	}
	m.crashPoint("delete:record")
	return m.releaseProjectID(id, pid, lookupPID)
}

// removeDirectory deletes the directory fsPath of filesystem volume id:
// its files, its quota when the quota's project ID is the volume's, and
// the directory itself. It returns the project ID left to release and
// whether to look it up by the volume's name (remove's pid and
// lookupPID), changed when the directory carried an ID or another
// volume's.
func (m *Manager) removeDirectory(id, fsPath string, pid uint32, lookupPID bool) (uint32, bool, error) {
	if err := refuseNestedMounts(fsPath); err != nil {
		return pid, lookupPID, err
	}
	if pid == 0 {
		if q, err := fsquota.GetQuota(fsPath); err == nil {
			pid = q.ProjectID
		}
	}
	if err := removeContents(fsPath); err != nil {
		return pid, lookupPID, err
	}
	m.crashPoint("delete:contents")
	if pid != 0 && m.CapacityEnforced() {
		ours, err := m.projectIDOf(id, pid)
		if err != nil {
			return pid, lookupPID, err
		}
		if ours {
			if err := fsquota.ClearQuota(fsPath); err != nil {
				return pid, lookupPID, err
			}
		} else {
			// The directory was moved to another volume's ID (by
			// hand): it goes, that volume's limits stay, and this
			// volume's own claim, if any, is found by name
			// (releaseProjectID).
			pid, lookupPID = 0, true
		}
	}
	m.crashPoint("delete:quota")
	if err := os.Remove(fsPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pid, lookupPID, fmt.Errorf("removing volume directory: %w", err)
	}
	m.crashPoint("delete:rmdir")
	return pid, lookupPID, m.durable("delete:volumes-dir", m.Data.Volumes.Sync())
}

// releaseProjectID gives up volume id's project ID once its files are
// gone: pid, or with lookupPID the one claimed in the volume's name. It
// clears the ID's limits when the ID is the volume's or nobody's, and
// releases the volume's claim on it.
func (m *Manager) releaseProjectID(id string, pid uint32, lookupPID bool) error {
	if m.ProjectIDs == nil {
		return nil
	}
	if pid == 0 && lookupPID {
		found, ok, err := m.ProjectIDs.Lookup(id)
		if err != nil {
			return err
		}
		if ok {
			pid = found
		}
	}
	if pid != 0 && m.CapacityEnforced() {
		// SetQuota sets the limits before it puts the ID on the
		// directory; a crash in between leaves limits that no directory
		// names, which ClearQuota in removeDirectory could not see.
		// Clearing by ID is idempotent, so it is done whenever the ID is
		// this volume's (or nobody's): another owner's limits are never
		// touched.
		if ours, err := m.projectIDOf(id, pid); err != nil {
			return err
		} else if ours {
			if err := fsquota.ClearLimits(m.Data.Volumes.FullPath(), pid); err != nil {
				return err
			}
		}
	}
	if pid != 0 {
		// The files charged to pid are gone, so the ID can be reused.
		// A claim held by another owner is not ours: leave it.
		if err := m.ProjectIDs.Release(pid, id); err != nil && !errors.Is(err, fsquota.ErrIDInUse) {
			return err
		}
	}
	return nil
}

// projectIDOf reports whether project ID pid is volume id's to clear: its
// claim is id's, or nobody's (released by an earlier, interrupted try).
func (m *Manager) projectIDOf(id string, pid uint32) (bool, error) {
	owner, held, err := m.ProjectIDs.Owner(pid)
	if err != nil {
		return false, err
	}
	return !held || owner == id, nil
}

// removeContents deletes everything inside dir but dir itself, which must
// stay until its quota is cleared.
func removeContents(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing volume directory: %w", err)
	}
	for _, e := range entries {
		// RemoveAll removes symlinks, never what they point to.
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("removing volume contents: %w", err)
		}
	}
	return nil
}

// refuseNestedMounts fails when a mount point lies strictly inside dir
// (a bind mount a privileged pod made, a forgotten test mount): removing
// the volume's files would then delete files of that other mount. The
// volume directory itself being a mount source is fine; publications are
// bind mounts of it elsewhere.
func refuseNestedMounts(dir string) error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return fmt.Errorf("checking for mounts inside %s: %w", dir, err)
	}
	if nested := mountinfo.Under(mounts, filepath.Clean(dir)); len(nested) > 0 {
		return fmt.Errorf("refusing to remove volume files: %s is mounted inside the volume directory; unmount it first", nested[0].MountPoint)
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// refuseInUse fails with ErrInUse when the volume directory (or a part of
// it) is the source of a mount, or the image backs a loop device.
func refuseInUse(fsPath, imgPath string) error {
	if isDir(fsPath) {
		where, err := mountedFrom(fsPath)
		if err != nil {
			return err
		}
		if where != "" {
			return fmt.Errorf("%w: its directory is mounted at %s", ErrInUse, where)
		}
	}
	if isRegular(imgPath) {
		devs, err := loop.Lookup(imgPath)
		if err != nil {
			return err
		}
		if len(devs) > 0 {
			return fmt.Errorf("%w: its image backs %s", ErrInUse, devs[0])
		}
	}
	return nil
}

// mountedFrom returns a mount point whose source is dir or lies inside it
// (a bind mount of the volume, as the CSI plugin makes for a pod), or "".
// A bind mount shows in the mount table as the filesystem's device with
// the source's path within that filesystem as its root, so dir is first
// translated to that form through the mount that contains it.
func mountedFrom(dir string) (string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return "", err
	}
	dir = filepath.Clean(dir)
	var host *mountinfo.Mount
	for i, m := range mounts {
		if m.MountPoint == dir || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPoint, "/")+"/") {
			if host == nil || len(m.MountPoint) >= len(host.MountPoint) {
				host = &mounts[i]
			}
		}
	}
	if host == nil {
		return "", nil
	}
	rel := filepath.Join(host.Root, strings.TrimPrefix(dir, host.MountPoint))
	for _, m := range mounts {
		if m.Major != host.Major || m.Minor != host.Minor || m.MountPoint == host.MountPoint {
			continue
		}
		if m.Root == rel || strings.HasPrefix(m.Root, rel+"/") {
			return m.MountPoint, nil
		}
	}
	return "", nil
}
