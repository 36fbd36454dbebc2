// Package loop attaches files to Linux loop block devices with raw ioctls,
// without the losetup program.
//
// Block volumes are image files served through loop devices. Spawning
// losetup for every publish costs a fork+exec and a scan of every existing
// loop device (it walks sysfs to find a free one), which grows with the
// number of volumes on the node. The kernel already offers everything in
// three calls: LOOP_CTL_GET_FREE picks (or creates) an unbound device,
// LOOP_CONFIGURE (Linux >= 5.8) binds the file and applies all flags
// atomically, and LOOP_CTL_REMOVE deletes the device again.
//
// The package holds no global state: every call opens what it needs and
// closes it again, so there is nothing to initialise and nothing to leak,
// and concurrent callers in one or many processes only meet in the kernel,
// whose EBUSY answers are retried here.
package loop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Major is the block device major number of loop devices (LOOP_MAJOR).
const Major = 7

// controlPath is the loop control device; see loop(4).
const controlPath = "/dev/loop-control"

// ErrNotLoop is returned (wrapped) by Open when the path exists but is not a
// loop block device.
var ErrNotLoop = errors.New("not a loop device")

// ErrDetached is returned (wrapped) when a loop device exists but has no
// backing file bound to it.
var ErrDetached = errors.New("loop device has no backing file")

// Options say how Create configures a new device. Partition scanning is
// never enabled: a volume's contents are written by its user, and the host
// should not parse partition tables it does not trust.
type Options struct {
	// ReadOnly makes the device reject writes. The kernel also forces
	// read-only when the backing file is not open for writing; Create
	// refuses that combination instead of silently degrading.
	ReadOnly bool
	// DirectIO asks the kernel to bypass the page cache of the backing
	// file, so data is not cached twice. The kernel may accept the flag and
	// still run buffered (for example when the backing filesystem's block
	// size does not match); read Status().Flags to see what was applied.
	DirectIO bool
	// Autoclear detaches the backing file when the last open descriptor of
	// the device is closed, so a crashed owner does not leak the binding.
	Autoclear bool
	// BlockSize is the logical block size of the device (512, 1024, 2048 or
	// 4096); 0 lets the kernel choose.
	BlockSize uint32
}

// Flags are the loop flags as the kernel reports them (LOOP_GET_STATUS64).
type Flags struct {
	ReadOnly  bool
	DirectIO  bool
	Autoclear bool
	PartScan  bool
}

func flagsFromKernel(f uint32) Flags {
	return Flags{
		ReadOnly:  f&unix.LO_FLAGS_READ_ONLY != 0,
		DirectIO:  f&unix.LO_FLAGS_DIRECT_IO != 0,
		Autoclear: f&unix.LO_FLAGS_AUTOCLEAR != 0,
		PartScan:  f&unix.LO_FLAGS_PARTSCAN != 0,
	}
}

// Status is what the kernel reports about a bound loop device.
type Status struct {
	// Number is N of /dev/loopN.
	Number int
	// Flags are the flags in effect, which can differ from the requested
	// ones (see Options.DirectIO).
	Flags Flags
	// BackingDev and BackingInode identify the backing file even after it
	// was renamed or deleted.
	BackingDev   uint64
	BackingInode uint64
	// Offset and SizeLimit are the window of the backing file the device
	// exposes (SizeLimit 0 means up to the end of the file).
	Offset    uint64
	SizeLimit uint64
}

// Device is an open loop block device. Its methods are safe for concurrent
// use. The open descriptor keeps an Autoclear device bound until Close.
type Device struct {
	f      *os.File
	path   string
	number int
	dev    uint64
}

// Path returns the device node, e.g. /dev/loop3.
func (d *Device) Path() string { return d.path }

// Number returns N of /dev/loopN.
func (d *Device) Number() int { return d.number }

// Dev returns the device number (major 7), as needed for mknod(2) when the
// device is exposed in another mount namespace.
func (d *Device) Dev() uint64 { return d.dev }

// Create binds backing to a free loop device and returns it open. The
// backing file can be closed by the caller afterwards: the kernel holds its
// own reference. It is CreateExcept with no number reserved.
func Create(backing *os.File, opts Options) (*Device, error) {
	return CreateExcept(backing, opts, nil)
}

// CreateAt binds backing to /dev/loopN, the number the caller chose, and
// returns it open. The device is made first if it does not exist
// (LOOP_CTL_ADD); a device that already serves a file is never taken over:
// the kernel's LOOP_CONFIGURE refuses it, and CreateAt fails with an error
// wrapping EBUSY.
//
// Create is what volumes use; CreateAt exists for the moment a number must
// be reproduced, such as a test that makes a foreign file take the very
// number a crashed owner recorded, to prove the record is not trusted.
func CreateAt(n int, backing *os.File, opts Options) (*Device, error) {
	if n < 0 {
		return nil, fmt.Errorf("creating loop device: invalid number %d", n)
	}
	if backing == nil {
		return nil, fmt.Errorf("creating loop%d: backing file is nil", n)
	}
	if err := checkBacking(backing, opts); err != nil {
		return nil, fmt.Errorf("creating loop%d for %s: %w", n, backing.Name(), err)
	}
	ctl, err := os.OpenFile(controlPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating loop%d: %w", n, err)
	}
	defer ctl.Close()
	err = control(ctl, func(fd int) error { return ioctlInt(fd, unix.LOOP_CTL_ADD, uintptr(n)) })
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("creating loop%d: LOOP_CTL_ADD: %w", n, err)
	}
	d, err := configure(n, backing, kernelFlags(opts), opts)
	if err != nil {
		return nil, fmt.Errorf("creating loop%d for %s: %w", n, backing.Name(), err)
	}
	return d, nil
}

// kernelFlags are the LO_FLAGS_* that opts ask for.
func kernelFlags(opts Options) uint32 {
	var flags uint32
	if opts.ReadOnly {
		flags |= unix.LO_FLAGS_READ_ONLY
	}
	if opts.DirectIO {
		flags |= unix.LO_FLAGS_DIRECT_IO
	}
	if opts.Autoclear {
		flags |= unix.LO_FLAGS_AUTOCLEAR
	}
	return flags
}

// retryable reports whether a failure to configure a free device was a race
// with another process rather than a real error.
func retryable(err error) bool {
	return errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV)
}

func checkBacking(backing *os.File, opts Options) error {
	switch opts.BlockSize {
	case 0, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("invalid block size %d (want 0, 512, 1024, 2048 or 4096)", opts.BlockSize)
	}
	var mode int
	if err := control(backing, func(fd int) (err error) {
		mode, err = unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		return err
	}); err != nil {
		return fmt.Errorf("reading backing file mode: %w", err)
	}
	if !opts.ReadOnly && mode&unix.O_ACCMODE == unix.O_RDONLY {
		return errors.New("backing file is open read-only but a writable device was requested")
	}
	return nil
}

// configure opens /dev/loopN and binds backing to it.
func configure(n int, backing *os.File, flags uint32, opts Options) (*Device, error) {
	path := "/dev/loop" + strconv.Itoa(n)
	// The open mode matters: the kernel makes the device read-only when it
	// is configured through a read-only descriptor.
	mode := os.O_RDWR
	if opts.ReadOnly {
		mode = os.O_RDONLY
	}
	f, err := os.OpenFile(path, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	cfg := unix.LoopConfig{Size: opts.BlockSize}
	cfg.Info.Flags = flags
	// lo_file_name is informational (the kernel shows it in
	// LOOP_GET_STATUS64); the full path comes from sysfs.
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], backing.Name())
	err = control(backing, func(bfd int) error {
		cfg.Fd = uint32(bfd)
		return control(f, func(fd int) error { return unix.IoctlLoopConfigure(fd, &cfg) })
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", path, err)
	}
	d, err := newDevice(f, path, n)
	if err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// Open opens an existing loop device by path. It fails with an error
// wrapping ErrNotLoop when path is something else, so callers can tell a
// stale path that now names another device from a real loop device.
func Open(path string) (*Device, error) {
	// Read-only is enough: every ioctl used here works on a read-only
	// descriptor for root, and a read-only open cannot interfere with the
	// device's users.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening loop device: %w", err)
	}
	d, err := newDevice(f, path, -1)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening loop device: %w", err)
	}
	return d, nil
}

// newDevice checks that f is a loop device and wraps it. n is N of
// /dev/loopN when known, else -1.
func newDevice(f *os.File, path string, n int) (*Device, error) {
	var st unix.Stat_t
	if err := control(f, func(fd int) error { return unix.Fstat(fd, &st) }); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != Major {
		return nil, fmt.Errorf("%s: %w", path, ErrNotLoop)
	}
	if n < 0 {
		// The minor number encodes N shifted by the partition bits;
		// sysfs knows the name without guessing max_part.
		var err error
		if n, err = numberOf(st.Rdev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return &Device{f: f, path: path, number: n, dev: st.Rdev}, nil
}

func numberOf(rdev uint64) (int, error) {
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(rdev), unix.Minor(rdev)))
	if err != nil {
		return 0, fmt.Errorf("finding loop device name: %w", err)
	}
	name := filepath.Base(link)
	n, err := strconv.Atoi(strings.TrimPrefix(name, "loop"))
	if err != nil || !strings.HasPrefix(name, "loop") {
		// A partition of a loop device (loop0p1) has major 259 or 7 with
		// a partition minor; it is not a device we can manage.
		return 0, fmt.Errorf("%s is not a whole loop device: %w", name, ErrNotLoop)
	}
	return n, nil
}

// Status reports the device's binding and the flags the kernel really
// applied. It fails with ErrDetached when nothing is bound.
func (d *Device) Status() (Status, error) {
	var info *unix.LoopInfo64
	err := control(d.f, func(fd int) (err error) {
		info, err = unix.IoctlLoopGetStatus64(fd)
		return err
	})
	if errors.Is(err, unix.ENXIO) {
		return Status{}, fmt.Errorf("reading status of %s: %w", d.path, ErrDetached)
	}
	if err != nil {
		return Status{}, fmt.Errorf("reading status of %s: LOOP_GET_STATUS64: %w", d.path, err)
	}
	return Status{
		Number:       int(info.Number),
		Flags:        flagsFromKernel(info.Flags),
		BackingDev:   info.Device,
		BackingInode: info.Inode,
		Offset:       info.Offset,
		SizeLimit:    info.Sizelimit,
	}, nil
}

// Serves reports whether the device is bound to the file at path, by the
// file's identity (device and inode), whatever name sysfs gives it (see
// Lookup). A detached device, or a missing file, serves nothing.
func (d *Device) Serves(path string) (bool, error) {
	var file unix.Stat_t
	if err := unix.Stat(path, &file); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	st, err := d.Status()
	if errors.Is(err, ErrDetached) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.BackingDev == file.Dev && st.BackingInode == file.Ino, nil
}

// Flags is a shortcut for Status().Flags.
func (d *Device) Flags() (Flags, error) {
	st, err := d.Status()
	return st.Flags, err
}

// BackingFile returns the path of the backing file as the kernel sees it
// (" (deleted)" appended if it was unlinked). It fails with ErrDetached
// when nothing is bound.
func (d *Device) BackingFile() (string, error) {
	b, err := os.ReadFile(backingAttr(d.number))
	if errors.Is(err, os.ErrNotExist) {
		// The loop attribute directory only exists while bound; make
		// sure the device itself is still there before saying so.
		if _, serr := d.Status(); serr != nil {
			return "", fmt.Errorf("reading backing file of %s: %w", d.path, serr)
		}
	}
	if err != nil {
		return "", fmt.Errorf("reading backing file of %s: %w", d.path, err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// Size returns the device size in bytes (BLKGETSIZE64).
func (d *Device) Size() (uint64, error) {
	var size uint64
	err := control(d.f, func(fd int) error { return ioctlPtr(fd, unix.BLKGETSIZE64, &size) })
	if err != nil {
		return 0, fmt.Errorf("reading size of %s: BLKGETSIZE64: %w", d.path, err)
	}
	return size, nil
}

// RefreshSize makes the device pick up the current size of its backing
// file (LOOP_SET_CAPACITY), after the file was grown to expand a volume.
func (d *Device) RefreshSize() error {
	err := control(d.f, func(fd int) error { return unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0) })
	if errors.Is(err, unix.ENXIO) {
		err = ErrDetached
	}
	if err != nil {
		return fmt.Errorf("refreshing size of %s: LOOP_SET_CAPACITY: %w", d.path, err)
	}
	return nil
}

// Close closes the descriptor. An Autoclear device is detached by the kernel
// when this was its last opener; other devices stay bound.
func (d *Device) Close() error {
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", d.path, err)
	}
	return nil
}

// Detach unbinds the backing file and closes the Device, leaving the
// unbound /dev/loopN for the next Create to reuse (as `losetup -d` does).
// This is the fast way to free a device: the number of devices then stays
// at the peak number of volumes in use, and deleting a device costs the
// kernel tens of milliseconds (see Remove).
//
// If another process still has the device open, the kernel defers the
// detach until it closes; Detach waits up to a second for such openers
// (udev's probes are brief) and then fails with an error wrapping EBUSY,
// the detach still pending. If a concurrent Create reused the device as
// soon as it was free, the device is no longer ours and Detach succeeds.
func (d *Device) Detach() error {
	_, err := d.detach("detaching")
	return err
}

// Remove detaches the backing file like Detach and then deletes the device
// itself (LOOP_CTL_REMOVE), so no /dev/loopN is left behind. Deleting a
// block device waits for the kernel's RCU grace periods and takes far
// longer than attaching one (~45 ms against ~0.1 ms). It can also pull a
// free device from under a program that got its number from
// LOOP_CTL_GET_FREE and has not opened it yet (Create retries then; losetup
// may fail). Prefer Detach unless devices must not linger.
func (d *Device) Remove() error {
	reused, err := d.detach("removing")
	if err != nil || reused {
		return err
	}
	return removeNumber(d.number, d.path)
}

// detach implements Detach; reused reports that the number already serves
// another Create.
func (d *Device) detach(op string) (reused bool, err error) {
	defer d.f.Close()
	before, err := d.Status()
	if errors.Is(err, ErrDetached) {
		return false, d.close(op)
	}
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", op, d.path, err)
	}
	err = control(d.f, func(fd int) error { return unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0) })
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return false, fmt.Errorf("%s %s: LOOP_CLR_FD: %w", op, d.path, err)
	}
	after, err := d.Status()
	if errors.Is(err, ErrDetached) {
		return false, d.close(op)
	}
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", op, d.path, err)
	}
	if after.BackingDev != before.BackingDev || after.BackingInode != before.BackingInode {
		return true, nil
	}
	// Still bound to our file: with other openers the kernel only marks
	// the device autoclear and returns success; the binding ends when the
	// last opener closes. Openers are often short-lived (udev's blkid
	// probe, a racing Create that lost), so wait a little for them.
	backing, err := d.BackingFile()
	if cerr := d.close(op); cerr != nil {
		return false, cerr
	}
	if errors.Is(err, ErrDetached) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", op, d.path, err)
	}
	reused, err = waitDetached(d.number, backing, time.Second)
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", op, d.path, err)
	}
	return reused, nil
}

func (d *Device) close(op string) error {
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("%s %s: close: %w", op, d.path, err)
	}
	return nil
}

// waitDetached waits until /dev/loopN no longer serves backing (a path as
// in sysfs). It reports reused when another file was bound meanwhile. It
// polls sysfs rather than opening the device, because an open would be one
// more opener delaying the detach. (sysfs names the file by path only, so
// a concurrent Create over the very same path looks like ours and ends in
// EBUSY after the timeout.)
func waitDetached(n int, backing string, timeout time.Duration) (reused bool, err error) {
	attr := backingAttr(n)
	delay := 100 * time.Microsecond
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(attr)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		if err == nil && strings.TrimSuffix(string(b), "\n") != backing {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("open by another process, detach deferred until it closes: %w", unix.EBUSY)
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// removeNumber deletes /dev/loopN once it is unbound and unused.
func removeNumber(n int, path string) error {
	ctl, err := os.OpenFile(controlPath, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	defer ctl.Close()
	// Short-lived openers (udev's blkid probe after a change event) make
	// the kernel answer EBUSY for a moment; wait for them, up to ~2s.
	delay := 50 * time.Microsecond
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := control(ctl, func(fd int) error {
			return ioctlInt(fd, unix.LOOP_CTL_REMOVE, uintptr(n))
		})
		switch {
		case err == nil, errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
			// Removed now, or already gone.
			return nil
		case !errors.Is(err, unix.EBUSY):
			return fmt.Errorf("removing %s: LOOP_CTL_REMOVE: %w", path, err)
		}
		if bound(n) {
			// Our binding was cleared (LOOP_CLR_FD succeeded), so a
			// binding now belongs to a later Create that reused N.
			// That device is not ours to delete.
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("removing %s: still open by another process: LOOP_CTL_REMOVE: %w", path, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// bound reports whether /dev/loopN has a backing file, without opening it
// (an open would itself make LOOP_CTL_REMOVE fail).
func bound(n int) bool {
	_, err := os.Stat(backingAttr(n))
	return err == nil
}
