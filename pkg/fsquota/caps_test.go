package fsquota_test

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// withoutSysResource runs fn on a thread that lacks CAP_SYS_RESOURCE in its
// effective set. The generic quota code (ext4) lets holders of that
// capability exceed hard limits; XFS does not. Volume users (pods) run
// without it, so that is how the tests write.
func withoutSysResource(fn func() error) error {
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("capget: %w", err)
	}
	saved := data
	data[0].Effective &^= 1 << unix.CAP_SYS_RESOURCE
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("capset: %w", err)
	}
	err := fn()
	if rerr := unix.Capset(&hdr, &saved[0]); rerr != nil {
		// Leave the thread locked: it exits with this goroutine rather
		// than serving others without the capability.
		return fmt.Errorf("restoring capabilities: %w", rerr)
	}
	runtime.UnlockOSThread()
	return err
}
