package loop

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// CreateExcept binds backing to a free loop device whose number reserved
// does not name, and returns it open. The backing file can be closed by
// the caller afterwards: the kernel holds its own reference.
//
// A free device is not always a safe one to hand out. A program given
// /dev/loopN (a container with the device node and a device-cgroup rule
// for it) keeps reaching whatever is bound to that number next, and
// LOOP_CLR_FD needs no capability, only an open descriptor: such a program
// can free its own device behind its owner's back. Its owner reserves the
// number until the program is gone, and a reserved number is never taken
// here even while the kernel calls it free.
//
// A device is taken with LOOP_CTL_GET_FREE, the lowest unbound number, and
// configured in one LOOP_CONFIGURE call. When that number is reserved, the
// next numbers above it are tried in turn (skipping reserved and bound
// ones, made with LOOP_CTL_ADD where missing), so the cost grows only with
// the reserved numbers that are free, which their owners rebind soon. Two
// callers can be handed the same free device; the loser gets EBUSY (or
// finds the node removed) and retries with another one, so concurrent
// Creates never share a device.
//
// The device is opened without O_EXCL on purpose: LOOP_CONFIGURE claims
// the device exclusively inside the kernel while it binds, which is the
// race that matters, and a lasting exclusive open would stop the volume's
// user from mounting the device.
func CreateExcept(backing *os.File, opts Options, reserved func(n int) bool) (*Device, error) {
	if backing == nil {
		return nil, errors.New("creating loop device: backing file is nil")
	}
	if err := checkBacking(backing, opts); err != nil {
		return nil, fmt.Errorf("creating loop device for %s: %w", backing.Name(), err)
	}
	flags := kernelFlags(opts)
	ctl, err := os.OpenFile(controlPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating loop device: %w", err)
	}
	defer ctl.Close()

	const attempts = 100
	var lastErr error
	for try := 0; try < attempts; try++ {
		n, err := freeNumber(ctl, reserved)
		if err != nil {
			return nil, fmt.Errorf("creating loop device: %w", err)
		}
		d, err := configure(n, backing, flags, opts)
		if err == nil {
			return d, nil
		}
		if !retryable(err) {
			return nil, fmt.Errorf("creating loop device for %s: %w", backing.Name(), err)
		}
		// Another caller bound or removed /dev/loopN between our
		// choice and CONFIGURE; ask again. Back off a little once it
		// keeps happening so busy callers do not spin.
		lastErr = err
		if try > 10 {
			time.Sleep(time.Duration(try) * 100 * time.Microsecond)
		}
	}
	return nil, fmt.Errorf("creating loop device for %s: gave up after %d attempts: %w", backing.Name(), attempts, lastErr)
}

// freeNumber returns the number of an existing, unbound loop device that
// is not reserved: the kernel's lowest free one, or, when that one is
// reserved, the lowest number above it that is neither reserved nor
// bound, made with LOOP_CTL_ADD if it does not exist yet.
func freeNumber(ctl *os.File, reserved func(n int) bool) (int, error) {
	var n int
	if err := control(ctl, func(fd int) (err error) {
		n, err = unix.IoctlRetInt(fd, unix.LOOP_CTL_GET_FREE)
		return err
	}); err != nil {
		return 0, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
	}
	if reserved == nil || !reserved(n) {
		return n, nil
	}
	for n++; reserved(n) || bound(n); n++ {
	}
	err := control(ctl, func(fd int) error { return ioctlInt(fd, unix.LOOP_CTL_ADD, uintptr(n)) })
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return 0, fmt.Errorf("LOOP_CTL_ADD %d: %w", n, err)
	}
	return n, nil
}

// ClearAutoclear takes back a request to detach the device when its last
// opener closes it (LO_FLAGS_AUTOCLEAR). Any opener of a bound device can
// make that request: LOOP_CLR_FD from a program that is not the only
// opener only sets the flag. An owner that keeps the device open for as
// long as the number is given out has nothing to fear while it holds it,
// but if the owner's process ends first the device would be freed, so the
// owner clears the flag whenever it finds it set. It fails with
// ErrDetached when nothing is bound.
func (d *Device) ClearAutoclear() error {
	err := control(d.f, func(fd int) error {
		info, err := unix.IoctlLoopGetStatus64(fd)
		if err != nil || info.Flags&unix.LO_FLAGS_AUTOCLEAR == 0 {
			return err
		}
		info.Flags &^= unix.LO_FLAGS_AUTOCLEAR
		return unix.IoctlLoopSetStatus64(fd, info)
	})
	if errors.Is(err, unix.ENXIO) {
		err = ErrDetached
	}
	if err != nil {
		return fmt.Errorf("clearing autoclear of %s: %w", d.path, err)
	}
	return nil
}
