package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/loop"
)

// Expand grows volume id to bytes (rounded up to Alignment) and returns it.
// A volume never shrinks: asking for its current size or less returns it
// unchanged, which also makes retries idempotent. A filesystem volume's
// quota is raised (one quotactl, atomic); a block volume's image is
// extended and the new part allocated. A failed allocation (ErrNoSpace)
// leaves the image at its old size with no blocks allocated past its end:
// XFS keeps the blocks a failed fallocate did get, beyond EOF, until the
// file is truncated, and those would be lost to every other volume.
//
// Every loop device serving a block volume's image re-reads its size
// (LOOP_SET_CAPACITY) before Expand returns, also when the volume had the
// size already (a retry after a crash in between): a published block
// volume shows its new size in the pod at once, with no node-side step.
// Likewise a filesystem volume's quota is made durable (fsquota.Sync)
// before Expand returns, also on a retry: the caller records the new size
// in the cluster, and a power loss must not take the quota back under it.
//
// A filesystem volume's quota is its own project's, the ID claimed for it
// (ProjectIDs), not whatever ID its directory carries: a process using the
// volume can change that one (chattr -p) to another volume's, and Expand
// then refuses, transiently, until the quota audit puts the ID back
// (RestoreProjectIDs), rather than read or raise the other volume's limit.
func (m *Manager) Expand(ctx context.Context, id string, bytes int64) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("expanding volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return Info{}, fmt.Errorf("expanding volume: %w", err)
	}
	defer m.changes.signal()
	size, err := alignSize(bytes)
	if err != nil {
		return Info{}, fmt.Errorf("expanding volume %s: %w", id, err)
	}
	unlock := m.locks.Lock(id)
	defer unlock()
	cur, err := m.current(id)
	if err != nil {
		return Info{}, fmt.Errorf("expanding volume %s: %w", id, err)
	}
	if size > cur.CapacityBytes {
		if cur.Mode == Filesystem {
			err = m.expandFilesystem(id, cur.CapacityBytes, size)
		} else {
			err = m.expandBlock(id, cur.CapacityBytes, size)
		}
		if err != nil {
			return Info{}, fmt.Errorf("expanding volume %s from %s to %s: %w", id, formatBytes(cur.CapacityBytes), formatBytes(size), err)
		}
		cur.CapacityBytes = size
	}
	fsPath, imgPath := m.paths(id)
	switch {
	case cur.Mode == Block:
		if err := refreshLoops(imgPath); err != nil {
			return Info{}, fmt.Errorf("expanding volume %s: %w", id, err)
		}
	case m.CapacityEnforced():
		if err := m.durable("expand:quota", fsquota.Sync(fsPath)); err != nil {
			return Info{}, fmt.Errorf("expanding volume %s: %w", id, err)
		}
	}
	return cur, nil
}

// refreshLoops makes every loop device whose backing file is image re-read
// the image's size. A device that is detached, or rebound to another file,
// between the lookup and the refresh is skipped: it no longer serves the
// volume.
func refreshLoops(image string) error {
	paths, err := loop.Lookup(image)
	if err != nil {
		return fmt.Errorf("finding the loop devices of %s: %w", image, err)
	}
	for _, p := range paths {
		d, err := loop.Open(p)
		if err != nil {
			continue
		}
		serves, err := d.Serves(image)
		if err == nil && serves {
			err = d.RefreshSize()
		}
		d.Close()
		if err != nil {
			return fmt.Errorf("refreshing the size of %s: %w", p, err)
		}
	}
	return nil
}

func (m *Manager) expandFilesystem(id string, from, to int64) error {
	fsPath, _ := m.paths(id)
	release, err := m.promise(id, to-from, NoOvercommit)
	if err != nil {
		return err
	}
	defer release()
	if !m.CapacityEnforced() {
		// As Create: a size that cannot be enforced is refused unless
		// the operator accepted that.
		if err := m.checkFilesystemAllowed(); err != nil {
			return err
		}
		return setRecordedCapacity(fsPath, to)
	}
	pid, err := m.expansionProjectID(id, fsPath)
	if err != nil {
		return err
	}
	// The recorded size first: a crash before the quota follows leaves
	// the volume reported abnormal (Stat) until the resizer's retry
	// raises the quota, never a quota larger than the record says.
	if err := setRecordedCapacity(fsPath, to); err != nil {
		return err
	}
	if err := fsquota.SetQuota(fsPath, pid, fsquota.Limits{Bytes: uint64(to), Inodes: InodeLimit(to)}); err != nil {
		if rerr := setRecordedCapacity(fsPath, from); rerr != nil {
			return fmt.Errorf("%w (and restoring the recorded size: %v)", classifySpace(err), rerr)
		}
		return classifySpace(err)
	}
	return nil
}

// expansionProjectID returns the project whose limits are filesystem
// volume id's size: the one claimed for it, which its directory must carry.
// A directory moved to another project is refused (not an ErrInvalid: the
// quota audit moves it back, and a retry then succeeds). A volume with no
// claim (made before claims were kept) uses its directory's ID, unless
// that ID is another volume's.
func (m *Manager) expansionProjectID(id, fsPath string) (uint32, error) {
	q, err := fsquota.GetQuota(fsPath)
	if err != nil && !errors.Is(err, fsquota.ErrNoQuota) {
		return 0, fmt.Errorf("reading the volume's quota: %w", err)
	}
	var carried uint32
	if q != nil {
		carried = q.ProjectID
	}
	pid, ok, err := m.ownProject(id, carried)
	if err != nil {
		return 0, err
	}
	switch {
	case ok && carried != 0 && carried != pid:
		return 0, fmt.Errorf("the volume's directory carries project ID %d, not the volume's own %d: a process using the volume changed it; "+
			"the quota audit puts the volume's ID back, and the expansion is retried", carried, pid)
	case ok:
		return pid, nil
	case carried == 0:
		return 0, fmt.Errorf("reading the volume's quota: %w", fsquota.ErrNoQuota)
	}
	if ours, err := m.projectIDOf(id, carried); err != nil {
		return 0, err
	} else if !ours {
		return 0, fmt.Errorf("the volume's directory carries project ID %d, which belongs to another volume", carried)
	}
	return carried, nil
}

func (m *Manager) expandBlock(id string, from, to int64) error {
	_, imgPath := m.paths(id)
	if err := m.writeIntent(id, intent{Op: OpExpand, Mode: Block.String(), Bytes: to, PreviousBytes: from}); err != nil {
		return err
	}
	f, err := os.OpenFile(imgPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return errors.Join(fmt.Errorf("opening image file: %w", err), m.clearIntent(id))
	}
	defer f.Close()
	m.crashPoint("expand:intent")
	release, err := m.promise(id, to-from, NoOvercommit)
	if err != nil {
		return errors.Join(err, m.clearIntent(id))
	}
	defer release()
	m.crashPoint("expand:promised")
	if err := fallocate(f, from, to-from); err != nil {
		ferr := classifySpace(fmt.Errorf("allocating %d more bytes: %w", to-from, err))
		if terr := trimFile(f); terr != nil {
			// Keep the intent record: Recover trims again.
			return fmt.Errorf("%w (and trimming blocks past the end failed: %v)", ferr, terr)
		}
		return errors.Join(ferr, m.clearIntent(id))
	}
	if err := m.durable("expand:image", f.Sync()); err != nil {
		return fmt.Errorf("syncing image file: %w", err)
	}
	m.crashPoint("expand:allocated")
	return m.clearIntent(id)
}

// trimBlock frees blocks allocated past the end of volume id's image (left
// by an interrupted or failed expansion). A missing image is fine.
func (m *Manager) trimBlock(id string) error {
	_, imgPath := m.paths(id)
	f, err := os.OpenFile(imgPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening image file: %w", err)
	}
	defer f.Close()
	return trimFile(f)
}

// trimFile frees f's blocks beyond its size. Truncating to the current
// size does it on XFS and ext4 (both drop post-EOF extents on truncate);
// the size itself does not change, so no data is lost.
func trimFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("trimming image: %w", err)
	}
	if err := f.Truncate(fi.Size()); err != nil {
		return fmt.Errorf("trimming image to %d bytes: %w", fi.Size(), err)
	}
	return f.Sync()
}
