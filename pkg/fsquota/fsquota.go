// Package fsquota turns directories into size-limited volumes with
// filesystem project quotas.
//
// A project quota charges every block and inode of the files carrying a
// project ID to that ID. Giving a volume directory its own ID, with the
// PROJINHERIT flag so new files and subdirectories take the same ID, and a
// hard limit on the ID, makes the directory behave like a disk of exactly
// that size: writes beyond it fail (ENOSPC on XFS, EDQUOT on ext4) and
// statfs on the directory reports the limit as the size, which is what df
// and kubelet's volume stats show.
//
// The package talks to the kernel directly: FS_IOC_FSSETXATTR for the
// project ID and quotactl_fd(2) (Linux >= 5.14) with the Q_X* commands for
// limits and usage. quotactl_fd addresses the filesystem through an open
// directory, so no block device path is needed. The Q_X* commands work on
// XFS and, through the generic quota layer, on ext4 mounted with prjquota.
//
// One difference matters for tests: ext4 (like every filesystem using the
// generic quota code) lets processes with CAP_SYS_RESOURCE exceed hard
// limits, while XFS enforces project limits on everyone. Volume users (pods)
// normally lack that capability.
package fsquota

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is wrapped by Probe's errors when the filesystem does not
// enforce project quotas.
var ErrUnsupported = errors.New("project quotas not enforced")

// ErrNoQuota is wrapped when a directory has no project ID.
var ErrNoQuota = errors.New("directory has no project quota")

// Limits are hard limits of a project. Zero means unlimited.
type Limits struct {
	// Bytes is the space limit. The kernel counts in 512-byte units, so
	// SetQuota rounds up to a multiple of 512. The filesystem allocates
	// whole blocks (usually 4 KiB), so a limit that is not a multiple of
	// the block size cannot be filled to the last byte.
	Bytes uint64
	// Inodes limits the number of files and directories, counting the
	// volume directory itself.
	Inodes uint64
}

// Quota is a directory's project quota as the kernel reports it.
type Quota struct {
	ProjectID uint32
	Limits    Limits
	// UsedBytes and UsedInodes are charged to the project right now.
	UsedBytes  uint64
	UsedInodes uint64
}

const (
	magicXFS  = 0x58465342 // XFS_SUPER_MAGIC
	magicExt4 = 0xef53     // EXT4_SUPER_MAGIC (shared with ext2/ext3)
)

// Probe reports whether the filesystem holding dir enforces project
// quotas. It returns nil when SetQuota will work with any project ID (up
// to 2^32-1), and otherwise an error wrapping ErrUnsupported that says
// why, so node start-up can tell the operator what to fix (filesystem
// type, mount option, kernel).
func Probe(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("probing project quotas on %s: %w", dir, err)
	}
	var fsName string
	switch st.Type {
	case magicXFS:
		fsName = "xfs"
	case magicExt4:
		fsName = "ext4"
	default:
		return fmt.Errorf("probing project quotas on %s: filesystem type %#x is neither XFS nor ext4: %w", dir, st.Type, ErrUnsupported)
	}
	d, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("probing project quotas on %s: %w", dir, err)
	}
	defer unix.Close(d)
	stat := fsQuotaStatV{Version: fsQStatVVersion}
	err = call(d, func(fd uintptr) error {
		return quotactlFd(fd, qcmd(qXGetQStatV, prjQuota), 0, unsafe.Pointer(&stat))
	})
	switch {
	case errors.Is(err, unix.ENOSYS) && fsName == "xfs":
		// XFS offers no quotactl at all when mounted without quota
		// options, and also when the kernel lacks XFS quota support;
		// only the latter lacks /proc/fs/xfs/xqmstat.
		if _, serr := os.Stat("/proc/fs/xfs/xqmstat"); serr == nil {
			return fmt.Errorf("probing project quotas on %s: xfs mounted without prjquota (mount it with -o prjquota): %w", dir, ErrUnsupported)
		}
		return fmt.Errorf("probing project quotas on %s: the kernel lacks XFS quota support (CONFIG_XFS_QUOTA) or quotactl_fd (Linux >= 5.14): %w", dir, ErrUnsupported)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("probing project quotas on %s: the kernel lacks quota support (CONFIG_QUOTA) or quotactl_fd (Linux >= 5.14): %w", dir, ErrUnsupported)
	case err != nil:
		return fmt.Errorf("probing project quotas on %s: quotactl_fd(Q_XGETQSTATV): %w", dir, err)
	}
	if stat.Flags&quotaPDQEnfd == 0 {
		if stat.Flags&quotaPDQAcct != 0 {
			return fmt.Errorf("probing project quotas on %s: %s accounts project quotas but does not enforce them (mounted with pqnoenforce?): %w", dir, fsName, ErrUnsupported)
		}
		hint := "mount it with -o prjquota"
		if fsName == "ext4" {
			hint = "create it with -O project,quota and mount it with -o prjquota"
		}
		return fmt.Errorf("probing project quotas on %s: %s mounted without prjquota (%s): %w", dir, fsName, hint, ErrUnsupported)
	}
	if err := call(d, func(fd uintptr) error { _, err := getXattr(fd); return err }); err != nil {
		return fmt.Errorf("probing project quotas on %s: FS_IOC_FSGETXATTR: %v: %w", dir, err, ErrUnsupported)
	}
	if fsName == "xfs" {
		// An XFS that stores 16-bit project IDs refuses larger ones with
		// EINVAL on every SetQuota; callers pick IDs from the whole
		// 32-bit range (ext4 always stores 32 bits).
		var g xfsFsopGeomV1
		if err := call(d, func(fd uintptr) (err error) { g, err = xfsGeometry(fd); return err }); err != nil {
			return fmt.Errorf("probing project quotas on %s: XFS_IOC_FSGEOMETRY_V1: %w", dir, err)
		}
		if g.Flags&xfsGeomFlagsProjID32 == 0 {
			return fmt.Errorf("probing project quotas on %s: this xfs stores only 16-bit project IDs (a version 4 filesystem made without projid32bit); make it again with mkfs.xfs's defaults (version 5), or with -i projid32bit=1: %w", dir, ErrUnsupported)
		}
	}
	return nil
}

// openDir opens dir for the ioctls and quotactls. It uses a raw descriptor
// rather than an os.File: the descriptor never leaves the calling function,
// and os.File's extra fstat and poller registration are a third of
// SetQuota's cost in the VM.
func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

// call runs fn with the descriptor as the syscalls want it.
func call(fd int, fn func(fd uintptr) error) error { return fn(uintptr(fd)) }

// SetQuota gives dir the project ID id (with PROJINHERIT, so everything
// created below inherits it) and sets the project's hard limits. Calling it
// again with the same ID changes the limits, which is how a volume grows.
//
// It refuses a directory that already carries a different non-zero ID:
// files below would keep the old ID and escape the new limit. The limits
// are set before the ID is assigned, so a crash in between never leaves a
// directory with an ID but without a limit.
func SetQuota(dir string, id uint32, l Limits) error {
	if id == 0 {
		return fmt.Errorf("setting quota on %s: project ID 0 is the default project of every file", dir)
	}
	d, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("setting quota on %s: %w", dir, err)
	}
	defer unix.Close(d)
	return call(d, func(fd uintptr) error {
		x, err := getXattr(fd)
		if err != nil {
			return fmt.Errorf("setting quota on %s: FS_IOC_FSGETXATTR: %w", dir, err)
		}
		if x.Projid != 0 && x.Projid != id {
			return fmt.Errorf("setting quota on %s: directory already has project ID %d, not %d", dir, x.Projid, id)
		}
		if err := setLimits(fd, id, l); err != nil {
			return fmt.Errorf("setting quota on %s: %w", dir, err)
		}
		if x.Projid == id && x.Xflags&xflagProjInherit != 0 {
			return nil
		}
		x.Projid = id
		x.Xflags |= xflagProjInherit
		if err := setXattr(fd, &x); err != nil {
			return fmt.Errorf("setting quota on %s: assigning project ID %d: FS_IOC_FSSETXATTR: %w", dir, id, err)
		}
		return nil
	})
}

func setLimits(fd uintptr, id uint32, l Limits) error {
	q := fsDiskQuota{
		Version: fsDquotVersion,
		Flags:   fsProjQuota,
		// Soft limits are cleared: they only start grace timers, and a
		// volume is meant to have one hard size.
		Fieldmask:    dqBHard | dqBSoft | dqIHard | dqISoft,
		ID:           id,
		BlkHardlimit: (l.Bytes + basicBlock - 1) / basicBlock,
		InoHardlimit: l.Inodes,
	}
	err := quotactlFd(fd, qcmd(qXSetQLim, prjQuota), id, unsafe.Pointer(&q))
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ESRCH) {
		// ENOSYS: no quota support at all; ESRCH: quotas not turned on.
		return fmt.Errorf("setting limits of project %d: %w on this filesystem (Probe says why): quotactl_fd(Q_XSETQLIM): %w", id, ErrUnsupported, err)
	}
	if err != nil {
		return fmt.Errorf("setting limits of project %d: quotactl_fd(Q_XSETQLIM): %w", id, err)
	}
	return nil
}

// GetQuota reads the project ID of dir and that project's limits and usage.
// It fails with ErrNoQuota when dir has no project ID.
func GetQuota(dir string) (*Quota, error) {
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading quota of %s: %w", dir, err)
	}
	defer unix.Close(d)
	var q *Quota
	err = call(d, func(fd uintptr) error {
		x, err := getXattr(fd)
		if err != nil {
			return fmt.Errorf("FS_IOC_FSGETXATTR: %w", err)
		}
		if x.Projid == 0 {
			return ErrNoQuota
		}
		q, err = projectQuota(fd, x.Projid)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading quota of %s: %w", dir, err)
	}
	return q, nil
}

// ProjectQuota reads the limits and usage of project id on the filesystem
// holding dir (any directory of it), whichever files carry the ID. It is
// how a caller that knows which project is its own reads that project,
// when a directory's ID may have been changed by someone else.
func ProjectQuota(dir string, id uint32) (*Quota, error) {
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading quota of project %d: %w", id, err)
	}
	defer unix.Close(d)
	var q *Quota
	err = call(d, func(fd uintptr) error {
		q, err = projectQuota(fd, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading quota of project %d on %s: %w", id, dir, err)
	}
	return q, nil
}

// projectQuota reads project id's limits and usage through fd, an open
// directory of the filesystem.
func projectQuota(fd uintptr, id uint32) (*Quota, error) {
	var dq fsDiskQuota
	err := quotactlFd(fd, qcmd(qXGetQuota, prjQuota), id, unsafe.Pointer(&dq))
	if errors.Is(err, unix.ENOENT) {
		// No dquot yet: nothing charged and no limits set.
		return &Quota{ProjectID: id}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading project %d: quotactl_fd(Q_XGETQUOTA): %w", id, err)
	}
	return &Quota{
		ProjectID:  id,
		Limits:     Limits{Bytes: dq.BlkHardlimit * basicBlock, Inodes: dq.InoHardlimit},
		UsedBytes:  dq.Bcount * basicBlock,
		UsedInodes: dq.Icount,
	}, nil
}

// Sync makes every change to the filesystem holding dir durable, quota
// limits and project IDs included (syncfs). Q_XSETQLIM and
// FS_IOC_FSSETXATTR are journaled but not forced to disk: after a power
// loss, a limit set moments before can be back at its old value. syncfs
// also writes back the filesystem's dirty data, which can take a while on
// a busy node, so it is for rare changes that a caller reports as done
// elsewhere (a volume's expansion), not for every quota set.
func Sync(dir string) error {
	d, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("syncing the filesystem of %s: %w", dir, err)
	}
	defer unix.Close(d)
	if err := unix.Syncfs(d); err != nil {
		return fmt.Errorf("syncing the filesystem of %s: syncfs: %w", dir, err)
	}
	return nil
}

// ClearQuota removes the limits of dir's project and takes the project ID
// and PROJINHERIT off dir itself. Files below keep their ID (changing it
// would mean walking the tree), so release the ID for reuse only after the
// volume's contents are deleted. Clearing a directory without a project ID
// succeeds.
func ClearQuota(dir string) error {
	d, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("clearing quota of %s: %w", dir, err)
	}
	defer unix.Close(d)
	return call(d, func(fd uintptr) error {
		x, err := getXattr(fd)
		if err != nil {
			return fmt.Errorf("clearing quota of %s: FS_IOC_FSGETXATTR: %w", dir, err)
		}
		if x.Projid == 0 {
			return nil
		}
		if err := setLimits(fd, x.Projid, Limits{}); err != nil {
			return fmt.Errorf("clearing quota of %s: %w", dir, err)
		}
		id := x.Projid
		x.Projid = 0
		x.Xflags &^= xflagProjInherit
		if err := setXattr(fd, &x); err != nil {
			return fmt.Errorf("clearing quota of %s: removing project ID %d: FS_IOC_FSSETXATTR: %w", dir, id, err)
		}
		return nil
	})
}

// ClearLimits removes the limits of project id on the filesystem holding
// dir (any directory of it), whether or not a file still carries the ID.
// It is what cleans up after SetQuota was cut short between setting the
// limits and assigning the ID: then no directory names the project, and
// ClearQuota of the volume's directory finds nothing to clear.
func ClearLimits(dir string, id uint32) error {
	if id == 0 {
		return fmt.Errorf("clearing limits of project 0 on %s: the default project has none of ours", dir)
	}
	d, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("clearing limits of project %d: %w", id, err)
	}
	defer unix.Close(d)
	return call(d, func(fd uintptr) error { return setLimits(fd, id, Limits{}) })
}

// SetLimits sets the hard limits of project id on the filesystem holding
// dir (any directory of it), whichever directories carry the ID: how a
// caller that labelled its directories once (RestoreTree) moves its limit
// afterwards. Zero limits mean none; a limit meant to stop every write
// must therefore be at least one byte.
func SetLimits(dir string, id uint32, l Limits) error {
	if id == 0 {
		return fmt.Errorf("setting limits of project 0 on %s: the default project of every file takes none", dir)
	}
	d, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("setting limits of project %d: %w", id, err)
	}
	defer unix.Close(d)
	return call(d, func(fd uintptr) error { return setLimits(fd, id, l) })
}

// Projects returns every project the filesystem holding dir keeps a quota
// for (one with limits or with usage), by ID, project 0 (the default of
// every file) included. Limits outlive the files they limited, so this is
// how a test finds limits nothing uses any more: a volume's quota that was
// never cleared.
func Projects(dir string) (map[uint32]Quota, error) {
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing project quotas on %s: %w", dir, err)
	}
	defer unix.Close(d)
	out := map[uint32]Quota{}
	err = call(d, func(fd uintptr) error {
		for next := uint64(0); next <= 1<<32-1; {
			// Q_XGETNEXTQUOTA answers the first project at or above
			// next that has limits or usage, and ENOENT past the last.
			var dq fsDiskQuota
			err := quotactlFd(fd, qcmd(qXGetNextQuota, prjQuota), uint32(next), unsafe.Pointer(&dq))
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("quotactl_fd(Q_XGETNEXTQUOTA, %d): %w", next, err)
			}
			out[dq.ID] = Quota{
				ProjectID:  dq.ID,
				Limits:     Limits{Bytes: dq.BlkHardlimit * basicBlock, Inodes: dq.InoHardlimit},
				UsedBytes:  dq.Bcount * basicBlock,
				UsedInodes: dq.Icount,
			}
			next = uint64(dq.ID) + 1
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing project quotas on %s: %w", dir, err)
	}
	return out, nil
}
