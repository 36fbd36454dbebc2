package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

var (
	errNotExist = fs.ErrNotExist
	errCanceled = context.Canceled
	errDeadline = context.DeadlineExceeded
)

const (
	msRdonly     = unix.MS_RDONLY
	msNoexec     = unix.MS_NOEXEC
	msNoatime    = unix.MS_NOATIME
	msNodiratime = unix.MS_NODIRATIME
	msRelatime   = unix.MS_RELATIME
)

// bindFlags turns accepted mount flags and the CSI readonly flag into the
// flags of the bind mount's remount. nosuid and nodev are always set: a
// volume is data, and a pod must not gain privileges or reach devices
// through files another pod wrote into it.
func bindFlags(flags []string, readOnly bool) uintptr {
	f := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	for _, name := range flags {
		f |= supportedMountFlags[name]
	}
	if readOnly {
		f |= unix.MS_RDONLY
	}
	return f
}

// bindMount mounts source at target with flags.
//
// The mount is made with its flags already set: a detached clone of source
// (open_tree) gets them (mount_setattr) before it is attached at target
// (move_mount). That matters when the plugin runs in a container (deploy/'s
// DaemonSet): the kubelet's directory is mounted into it with Bidirectional
// propagation, so the kernel copies each new mount to the host and on to
// the pod, and a copy carries the flags the mount had when it was attached.
// A bind followed by a remount would leave the copies without nosuid and
// nodev: the remount only changes the plugin's own view.
//
// Kernels older than 5.12 lack mount_setattr; there the bind is remounted
// with the flags, which is complete only for a plugin in the host's mount
// namespace. Either way, if the flags cannot be applied the bind is undone,
// so a volume is never left mounted with weaker flags (read-write instead of
// read-only) than asked for.
func bindMount(source, target string, flags uintptr) error {
	err := attachWithFlags(source, target, flags)
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mounting %s at %s: %w", source, target, err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		uerr := unix.Unmount(target, 0)
		return fmt.Errorf("applying mount flags to %s: %w (undoing the bind mount: %v)", target, err, uerr)
	}
	return nil
}

// attachWithFlags clones source as a detached mount, sets flags on it and
// attaches it at target. It returns an error wrapping ENOSYS, having
// changed nothing, when the kernel lacks the new mount API.
func attachWithFlags(source, target string, flags uintptr) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("cloning %s for a bind mount: %w", source, err)
	}
	// Closing a detached tree that was never attached unmounts it.
	defer unix.Close(fd)
	attr := mountAttr(flags)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("applying mount flags to the bind mount of %s: %w", source, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching the bind mount of %s at %s: %w", source, target, err)
	}
	return nil
}

// mountAttr translates MS_* flags (bindFlags) into mount_setattr's
// attributes. The access-time mode is one field: setting noatime or
// relatime clears the old mode first.
func mountAttr(flags uintptr) unix.MountAttr {
	var a unix.MountAttr
	for ms, attr := range map[uintptr]uint64{
		unix.MS_RDONLY:     unix.MOUNT_ATTR_RDONLY,
		unix.MS_NOSUID:     unix.MOUNT_ATTR_NOSUID,
		unix.MS_NODEV:      unix.MOUNT_ATTR_NODEV,
		unix.MS_NOEXEC:     unix.MOUNT_ATTR_NOEXEC,
		unix.MS_NODIRATIME: unix.MOUNT_ATTR_NODIRATIME,
	} {
		if flags&ms != 0 {
			a.Attr_set |= attr
		}
	}
	switch {
	case flags&unix.MS_NOATIME != 0:
		a.Attr_clr |= unix.MOUNT_ATTR__ATIME
		a.Attr_set |= unix.MOUNT_ATTR_NOATIME
	case flags&unix.MS_RELATIME != 0:
		a.Attr_clr |= unix.MOUNT_ATTR__ATIME
		a.Attr_set |= unix.MOUNT_ATTR_RELATIME
	}
	return a
}

// sameFile reports whether a and b are the same inode. For a directory
// target it is true exactly when a bind mount of the source is on it: an
// unmounted target directory is an inode of its own.
func sameFile(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}

// isReadOnlyMount reports whether the mount at p is read-only.
func isReadOnlyMount(p string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return false, err
	}
	return st.Flags&unix.ST_RDONLY != 0, nil
}

// unmountAll unmounts source from target until target no longer shows it
// (a retried mount after a crash can stack two), then removes the target
// directory if it is empty. A target that is not mounted is fine.
func unmountAll(source, target string) error {
	for range 16 {
		same, err := sameFile(source, target)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checking mount at %s: %w", target, err)
		}
		if !same {
			break
		}
		if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", target, err)
		}
	}
	return removeTarget(target)
}

// removeTarget removes the target path the plugin created: an empty
// directory, or a device node. Anything else (a directory with content, a
// regular file with data) is not the plugin's and stays, with an error.
func removeTarget(target string) error {
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking target %s: %w", target, err)
	}
	switch {
	case fi.IsDir():
		if err := unix.Rmdir(target); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing target directory %s: %w", target, err)
		}
	case fi.Mode()&fs.ModeDevice != 0, fi.Mode().IsRegular() && fi.Size() == 0:
		if err := unix.Unlink(target); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing target %s: %w", target, err)
		}
	default:
		return fmt.Errorf("target %s is a %v the plugin did not create; leaving it", target, fi.Mode().Type())
	}
	return nil
}

// isBlockNode reports whether p is a block device node for rdev.
func isBlockNode(p string, rdev uint64) bool {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == rdev
}

// makeBlockNode creates the device node p for rdev, replacing whatever
// device node or empty file is there: a node left from before a restart may
// name a device number the kernel has since given to another volume.
func makeBlockNode(p string, rdev uint64) error {
	if err := removeTarget(p); err != nil {
		return err
	}
	if err := unix.Mknod(p, unix.S_IFBLK|0o660, int(rdev)); err != nil {
		return fmt.Errorf("creating device node %s: %w", p, err)
	}
	// mknod's mode is filtered by the umask.
	if err := unix.Chmod(p, 0o660); err != nil {
		return fmt.Errorf("setting mode of device node %s: %w", p, err)
	}
	return nil
}
