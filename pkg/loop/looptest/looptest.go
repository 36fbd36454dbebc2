// Package looptest does to loop devices what their users may do behind
// their owner's back, for tests of the owner.
package looptest

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Clear does what `losetup -d` does in a container that was given the
// device node at path: open it (read-only is enough) and LOOP_CLR_FD,
// which needs no capability. The kernel detaches the device when its last
// opener closes it; while another opener holds it, it is only marked
// autoclear.
func Clear(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("clearing loop device: %w", err)
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("clearing loop device %s: %w", path, err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetInt(int(fd), unix.LOOP_CLR_FD, 0) }); err != nil {
		return fmt.Errorf("clearing loop device %s: %w", path, err)
	}
	if ierr != nil {
		return fmt.Errorf("clearing loop device %s: LOOP_CLR_FD: %w", path, ierr)
	}
	return nil
}
