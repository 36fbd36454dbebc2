package loop

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// control runs fn with the raw descriptor of f. Going through SyscallConn
// keeps the descriptor referenced for the duration of fn, so a concurrent
// Close cannot make fn act on a reused descriptor number.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		// Control fails only when the file was closed; say so in the
		// form callers can test for.
		return fmt.Errorf("%w: %v", os.ErrClosed, err)
	}
	return ferr
}

// ioctlInt issues an ioctl whose argument is a plain integer.
func ioctlInt(fd int, req uint, arg uintptr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	if e != 0 {
		return e
	}
	return nil
}

// ioctlPtr issues an ioctl that writes a uint64 through its argument.
func ioctlPtr(fd int, req uint, out *uint64) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(out)))
	if e != 0 {
		return e
	}
	return nil
}
