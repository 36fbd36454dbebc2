package volume

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fallocate allocates [off, off+n) of f, extending its size, and retries
// when interrupted by a signal (Go's runtime preempts with SIGURG, and a
// long allocation can see one; tmpfs gives up at any pending signal).
func fallocate(f *os.File, off, n int64) error {
	return fallocateMode(f, 0, off, n)
}

// fallocateMode is fallocate with fallocate(2)'s mode flags (tests use
// FALLOC_FL_KEEP_SIZE to make the blocks past the end a failed
// allocation leaves).
func fallocateMode(f *os.File, mode uint32, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Fallocate(int(fd), mode, off, n)
			if !errors.Is(ferr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if ferr != nil {
		return fmt.Errorf("fallocate: %w", ferr)
	}
	return nil
}

// capacityXattr records a filesystem volume's size on its directory: the
// size reported when no quota can hold it (capacity not enforced), and
// what the quota must say where one does (Stat compares them). It is in
// the trusted namespace, which only CAP_SYS_ADMIN can read or change, so
// a pod that owns the directory cannot edit the size it is reported to
// have.
const capacityXattr = "trusted.plinth.capacity"

func setRecordedCapacity(dir string, size int64) error {
	if err := unix.Lsetxattr(dir, capacityXattr, []byte(strconv.FormatInt(size, 10)), 0); err != nil {
		return fmt.Errorf("recording capacity of %s in xattr %s: %w", dir, capacityXattr, err)
	}
	return nil
}

// recordedCapacity returns the size recorded by setRecordedCapacity, or 0
// when there is none.
func recordedCapacity(dir string) (int64, error) {
	buf := make([]byte, 32)
	n, err := unix.Lgetxattr(dir, capacityXattr, buf)
	if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading xattr %s of %s: %w", capacityXattr, dir, err)
	}
	v, err := strconv.ParseInt(string(buf[:n]), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("xattr %s of %s holds %q, not a size", capacityXattr, dir, buf[:n])
	}
	return v, nil
}
