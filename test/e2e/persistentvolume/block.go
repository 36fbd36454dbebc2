package main

import (
	"bytes"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blockChecks are the init checks of the two block claims.
func blockChecks(c config) []result {
	if c.SkipBlock != "" {
		return []result{{Name: "block, block-ro: all checks", Skip: c.SkipBlock}}
	}
	return []result{
		blockSizeCheck("block: BLKGETSIZE64", c.Block, c.Size),
		{Name: "block: O_DIRECT write, fsync, O_DIRECT read back (first and last block)", Err: directWriteReadBack(c.Block, []int64{0, c.Size - blockSize}, 0x3c)},
		blockSizeCheck("block-ro: BLKGETSIZE64", c.BlockReadOnly, c.Size),
		{Name: "block-ro: BLKROGET says read-only", Err: readOnlyDevice(c.BlockReadOnly)},
		{Name: "block-ro: a write fails with EPERM or EROFS", Err: readOnlyWrite(c.BlockReadOnly)},
	}
}

func blockSizeCheck(name, dev string, want int64) result {
	got, err := deviceSize(dev)
	if err == nil {
		err = sizeMatches("BLKGETSIZE64 of "+dev, got, want)
	}
	return result{Name: name, Err: err}
}

// deviceSize asks the kernel for the device's size in bytes.
func deviceSize(dev string) (int64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", dev, errno)
	}
	return int64(n), nil
}

// alignedBuffer returns n bytes at a page boundary, as O_DIRECT needs.
func alignedBuffer(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("allocating an aligned buffer: %w", err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// directWriteReadBack writes one block at each offset with O_DIRECT (past
// the page cache, to the device), fsyncs, and reads each back through a
// second O_DIRECT descriptor.
func directWriteReadBack(dev string, offsets []int64, seed byte) error {
	buf, free, err := alignedBuffer(blockSize)
	if err != nil {
		return err
	}
	defer free()
	w, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	for _, off := range offsets {
		copy(buf, pattern(seed, off, blockSize))
		if _, err := w.WriteAt(buf, off); err != nil {
			return fmt.Errorf("O_DIRECT write at %d: %w", off, err)
		}
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dev, err)
	}
	return directVerify(dev, offsets, seed)
}

// directVerify reads one block at each offset with O_DIRECT and compares
// it with what directWriteReadBack wrote there.
func directVerify(dev string, offsets []int64, seed byte) error {
	buf, free, err := alignedBuffer(blockSize)
	if err != nil {
		return err
	}
	defer free()
	r, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, off := range offsets {
		if _, err := r.ReadAt(buf, off); err != nil {
			return fmt.Errorf("O_DIRECT read at %d: %w", off, err)
		}
		if !bytes.Equal(buf, pattern(seed, off, blockSize)) {
			return fmt.Errorf("block at %d of %s does not read back what was written", off, dev)
		}
	}
	return nil
}

// readOnlyDevice checks the kernel's read-only flag of the device.
func readOnlyDevice(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	ro, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKROGET)
	if err != nil {
		return fmt.Errorf("BLKROGET %s: %w", dev, err)
	}
	if ro != 1 {
		return fmt.Errorf("%s is not read-only (BLKROGET = %d)", dev, ro)
	}
	return nil
}

// readOnlyWrite tries to write a block to the read-only device. Refusing
// to open it for writing counts as refusing the write, with the same rule
// for the error.
func readOnlyWrite(dev string) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return refusedReadOnly("opening "+dev+" for writing", err)
	}
	defer f.Close()
	_, err = f.WriteAt(pattern(0x99, 0, blockSize), 0)
	if err == nil {
		err = f.Sync()
	}
	return refusedReadOnly("writing to "+dev, err)
}
