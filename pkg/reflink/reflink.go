// Package reflink makes copy-on-write copies of files on filesystems that
// share extents between files (XFS with reflink=1, btrfs): one FICLONE
// ioctl per file makes the copy share every block of the original, in time
// independent of the file's size, until either side writes a block.
//
// Clone copies one open file, Probe finds out whether a directory's
// filesystem can clone at all, and CopyTree copies a directory tree file by
// file. The package knows nothing of volumes: what a copy means to one is
// the caller's.
package reflink

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is matched by the errors of Probe and Clone when the
// filesystem cannot share extents between files (ext4, tmpfs, an XFS made
// with reflink=0), or the two files are on different filesystems.
var ErrUnsupported = errors.New("the filesystem cannot make copy-on-write copies (reflink)")

// Clone makes dst, an empty file open for writing, a copy of src (open for
// reading) that shares all of src's blocks: one FICLONE. The kernel flushes
// src's dirty pages and locks both files for the call, so the copy is src
// at one instant, whatever writes are under way. dst's size becomes src's.
func Clone(dst, src *os.File) error {
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		return fmt.Errorf("cloning %s to %s: %w", src.Name(), dst.Name(), classify(err))
	}
	return nil
}

// classify makes the errors that mean "no reflink here" match
// ErrUnsupported: EOPNOTSUPP (the filesystem has no remap_file_range, or
// XFS without reflink), EXDEV (different filesystems), ENOTTY (a
// filesystem that does not know the ioctl at all).
func classify(err error) error {
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTTY) {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return err
}

// Probe reports whether files in dir can be cloned: it writes a small
// unnamed file there (O_TMPFILE, so a crash leaves nothing behind), clones
// it into another and compares the copy. nil means yes; an error matching
// ErrUnsupported means the filesystem cannot; any other error means the
// probe itself failed (dir missing, read-only, full).
func Probe(dir string) error {
	src, err := tmpFile(dir)
	if err != nil {
		return fmt.Errorf("probing reflink support in %s: %w", dir, err)
	}
	defer src.Close()
	want := make([]byte, 4096)
	for i := range want {
		want[i] = byte(i)
	}
	if _, err := src.Write(want); err != nil {
		return fmt.Errorf("probing reflink support in %s: %w", dir, err)
	}
	dst, err := tmpFile(dir)
	if err != nil {
		return fmt.Errorf("probing reflink support in %s: %w", dir, err)
	}
	defer dst.Close()
	if err := Clone(dst, src); err != nil {
		return fmt.Errorf("probing reflink support in %s: %w", dir, err)
	}
	got := make([]byte, len(want)+1)
	n, err := dst.ReadAt(got, 0)
	if n != len(want) || string(got[:n]) != string(want) {
		return fmt.Errorf("probing reflink support in %s: the clone reads back %d bytes unlike the original (%v)", dir, n, err)
	}
	return nil
}

func tmpFile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("making an unnamed file: %w", err)
	}
	return os.NewFile(uintptr(fd), dir+"/(unnamed)"), nil
}
