package volume

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// Stats is a volume's size, usage and health.
type Stats struct {
	Info
	// UsageKnown is false when usage cannot be measured cheaply (a
	// filesystem volume without quota); UsedBytes and the inode fields
	// are then 0, and AvailableBytes is the free space of the data
	// filesystem, capped at the capacity.
	UsageKnown     bool
	UsedBytes      int64
	AvailableBytes int64
	// Inode figures are set for filesystem volumes with a quota.
	Inodes     int64
	InodesUsed int64
	InodesFree int64
	// Abnormal reports a volume that exists but is not as Create left it
	// (quota gone, image sparse); Message says what is wrong, or, for a
	// normal volume, anything else worth knowing.
	Abnormal bool
	Message  string
}

// Stat reports volume id's capacity, usage and condition. For a filesystem
// volume the usage comes from the project quota: one quotactl, no matter
// how many files the volume holds (walking them, as the kubelet does
// without a CSI stats source, costs time proportional to their number).
// A block volume's usage is its whole size, which is allocated.
func (m *Manager) Stat(ctx context.Context, id string) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("reading stats of volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return Stats{}, fmt.Errorf("reading stats of volume: %w", err)
	}
	// Under the volume's lock: an expansion under way has an intent record
	// too, and only an interrupted one makes the volume abnormal.
	unlock := m.locks.Lock(id)
	defer unlock()
	mode, path, in, err := m.locate(id)
	if err != nil {
		return Stats{}, fmt.Errorf("reading stats of volume %s: %w", id, err)
	}
	var st Stats
	if mode == Filesystem {
		st, err = m.statFilesystem(id, path)
	} else {
		st, err = m.statBlock(id, path)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("reading stats of volume %s: %w", id, err)
	}
	if in != nil {
		st.Abnormal = true
		st.Message = fmt.Sprintf("an expansion to %d bytes was interrupted; it finishes on the next expansion or restart", in.Bytes)
	}
	return st, nil
}

func (m *Manager) statFilesystem(id, path string) (Stats, error) {
	st := Stats{Info: Info{ID: id, Mode: Filesystem}}
	q, err := fsquota.GetQuota(path)
	if err == nil && q.Limits.Bytes > 0 {
		st.CapacityBytes = int64(q.Limits.Bytes)
		st.UsageKnown = true
		st.UsedBytes = int64(q.UsedBytes)
		// The data filesystem can fill before the quota does (volumes
		// of an over-committing class, or other data beside the
		// volumes): what the volume can still take is the smaller of
		// its quota's room and the free space.
		st.AvailableBytes = max(st.CapacityBytes-st.UsedBytes, 0)
		if free, err := m.freeBytes(); err == nil {
			st.AvailableBytes = min(st.AvailableBytes, free)
		}
		st.Inodes = int64(q.Limits.Inodes)
		st.InodesUsed = int64(q.UsedInodes)
		st.InodesFree = max(st.Inodes-st.InodesUsed, 0)
		// Create and Expand always set both limits, the inodes from the
		// bytes (InodeLimit); a pair that does not match was set by
		// someone else, and the size Plinth promised is not what holds.
		// The directory must carry the project ID claimed for it: one
		// changed by hand (chattr -p) counts its usage under another
		// project's limits, or none.
		if m.ProjectIDs != nil {
			if owner, held, err := m.ProjectIDs.Owner(q.ProjectID); err == nil && owner != id {
				st.Abnormal = true
				st.Message = fmt.Sprintf("the directory carries project ID %d, which is not this volume's", q.ProjectID)
				if held {
					st.Message += " (it belongs to volume " + owner + ")"
				}
				return st, nil
			}
		}
		// The size Create or Expand recorded (none on volumes made before
		// it was recorded with quotas) must be what the quota holds.
		if recorded, err := recordedCapacity(path); err == nil && recorded > 0 && recorded != st.CapacityBytes {
			st.Abnormal = true
			st.Message = fmt.Sprintf("the project quota was changed outside Plinth (or an expansion was cut short): it allows %d bytes, the volume was made %d bytes",
				q.Limits.Bytes, recorded)
			return st, nil
		}
		if want := InodeLimit(st.CapacityBytes); q.Limits.Inodes != want {
			st.Abnormal = true
			st.Message = fmt.Sprintf("the project quota was changed outside Plinth: %d bytes and %d inodes, where Plinth sets %d inodes for that size",
				q.Limits.Bytes, q.Limits.Inodes, want)
		}
		return st, nil
	}
	recorded, rerr := recordedCapacity(path)
	if rerr != nil {
		return Stats{}, rerr
	}
	st.CapacityBytes = recorded
	// Without a quota the volume can still fill up when the data
	// filesystem does, so report what is really left for it; a zero here
	// would look like a full volume to every alert on free space.
	if free, err := m.freeBytes(); err == nil {
		st.AvailableBytes = min(st.CapacityBytes, free)
	}
	switch {
	case m.CapacityEnforced() && err != nil && !errors.Is(err, fsquota.ErrNoQuota):
		st.Abnormal = true
		st.Message = fmt.Sprintf("cannot read the project quota: %v", err)
	case m.CapacityEnforced():
		st.Abnormal = true
		st.Message = "the volume has no project quota: its size is not enforced"
	default:
		st.Message = "capacity not enforced on this node (no project quotas); usage is not measured"
	}
	return st, nil
}

// statBlock reports a block volume by its image. An image with holes (its
// pod discarded part of the device) is normal while the data filesystem
// has the free space to fill them again, which the accounting keeps from
// new volumes (Space.Unallocated); it is abnormal once it has not.
func (m *Manager) statBlock(id, path string) (Stats, error) {
	var s unix.Stat_t
	if err := unix.Stat(path, &s); err != nil {
		return Stats{}, fmt.Errorf("reading image file: %w", err)
	}
	st := Stats{
		Info:       Info{ID: id, Mode: Block, CapacityBytes: s.Size},
		UsageKnown: true,
		UsedBytes:  s.Size,
	}
	if holes := imageHoles(&s); holes > 0 {
		free, err := m.freeBytes()
		if err != nil || free < holes {
			st.Abnormal = true
			st.Message = fmt.Sprintf("%s of the image are not allocated (the pod discarded them) and the data filesystem has less free space than that: writes into them may fail",
				formatBytes(holes))
		}
	}
	return st, nil
}

// describe returns the existing complete volume id, or ErrNotFound.
// Callers hold id's lock and have settled interrupted operations.
func (m *Manager) describe(id string) (Info, error) {
	fsPath, imgPath := m.paths(id)
	fsExists, imgExists := isDir(fsPath), isRegular(imgPath)
	switch {
	case fsExists && imgExists:
		return Info{}, fmt.Errorf("%w: volume %s exists both as a directory and as an image; remove the wrong one by hand", ErrExists, id)
	case fsExists:
		info := Info{ID: id, Mode: Filesystem}
		q, err := m.quotaOf(id, fsPath)
		if err == nil && q.Limits.Bytes > 0 {
			info.CapacityBytes = int64(q.Limits.Bytes)
			return info, nil
		}
		size, err := recordedCapacity(fsPath)
		if err != nil {
			return Info{}, err
		}
		info.CapacityBytes = size
		return info, nil
	case imgExists:
		fi, err := os.Stat(imgPath)
		if err != nil {
			return Info{}, fmt.Errorf("reading image file: %w", err)
		}
		return Info{ID: id, Mode: Block, CapacityBytes: fi.Size()}, nil
	case exists(fsPath) || exists(imgPath):
		return Info{}, fmt.Errorf("%w: the volumes directory has an entry for %s that is neither a directory nor a regular image file", ErrExists, id)
	}
	return Info{}, fmt.Errorf("volume %s: %w", id, ErrNotFound)
}

// Locate returns the mode and the path of volume id's data: the directory
// of a filesystem volume, the image of a block volume. The CSI plugin
// bind-mounts or loop-attaches that path; it is the only way other code
// learns where a volume lives.
func (m *Manager) Locate(ctx context.Context, id string) (Mode, string, error) {
	if err := ctx.Err(); err != nil {
		return 0, "", err
	}
	if err := ValidateID(id); err != nil {
		return 0, "", err
	}
	mode, path, _, err := m.locate(id)
	if err != nil {
		return 0, "", fmt.Errorf("volume %s: %w", id, err)
	}
	return mode, path, nil
}

// locate finds volume id's data: its mode, the path of its directory or
// image, and its intent record, which is nil or an expansion under way or
// interrupted. A volume being created or deleted (or interrupted at it) is
// not a volume: ErrNotFound, as is one with no data.
func (m *Manager) locate(id string) (Mode, string, *intent, error) {
	in, err := m.readIntent(id)
	if err != nil {
		return 0, "", nil, err
	}
	if in != nil && in.Op != OpExpand {
		return 0, "", nil, fmt.Errorf("%w (a %s is in progress or was interrupted)", ErrNotFound, in.Op)
	}
	fsPath, imgPath := m.paths(id)
	switch {
	case isDir(fsPath):
		return Filesystem, fsPath, in, nil
	case isRegular(imgPath):
		return Block, imgPath, in, nil
	}
	return 0, "", nil, ErrNotFound
}

func isRegular(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}
