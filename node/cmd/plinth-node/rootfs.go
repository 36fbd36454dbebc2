package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// rootfsBind is the directory of the initramfs where init binds the
// initramfs to itself, on the way to making that bind mount the root.
const rootfsBind = "/.plinth-root"

// leaveRootfs makes the root directory a mount with a parent when the node
// booted from its initramfs. The kernel unpacks the initramfs into rootfs,
// the first mount of all, which has no parent; pivot_root refuses to move
// away from such a root (EINVAL), and both runc (a container's root) and
// gVisor's runsc (the sandbox's and the gofer's chroot) switch roots with
// pivot_root. Binding rootfs onto a directory of itself (recursively, so
// whatever the kernel mounted already comes along), moving that bind mount
// over / and chrooting into it (what switch_root does with a real root
// filesystem, without copying anything) leaves the same files as root, now
// on a mount whose parent is rootfs. A root that is not a RAM
// filesystem (the kernel mounted a disk) has a parent already and is left
// alone.
func leaveRootfs() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return fmt.Errorf("leaving rootfs: statfs /: %w", err)
	}
	if st.Type != unix.RAMFS_MAGIC && st.Type != unix.TMPFS_MAGIC {
		return nil
	}
	if err := os.Mkdir(rootfsBind, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("leaving rootfs: %w", err)
	}
	if err := unix.Mount("/", rootfsBind, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("leaving rootfs: binding / to %s: %w", rootfsBind, err)
	}
	if err := unix.Chdir(rootfsBind); err != nil {
		return fmt.Errorf("leaving rootfs: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("leaving rootfs: moving %s over /: %w", rootfsBind, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("leaving rootfs: chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("leaving rootfs: %w", err)
	}
	// The bind mount's mount point, seen from the new root, is an empty
	// directory of the same files: nothing needs it any more.
	_ = os.Remove(rootfsBind)
	return nil
}
