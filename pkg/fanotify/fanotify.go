// Package fanotify watches a whole filesystem for changes to its files
// with the kernel's fanotify(7), reporting each change by the file handle
// of the directory it happened in and the entry's name.
//
// Why a filesystem mark: a mark on a mount sees only what is done through
// that mount, and the writers a node cares about (pods) reach the data
// filesystem through bind mounts of their own. A mark on the filesystem
// (FAN_MARK_FILESYSTEM) sees every write, whichever mount it came
// through. Such a group cannot be given open file descriptors of the
// files (they would belong to any mount), so it reports file handles
// (FAN_REPORT_DFID_NAME, Linux >= 5.9): the directory's handle and the
// entry's name, which OpenDir turns back into a descriptor through the
// mount the watch was opened on.
//
// The contract:
//   - Open needs CAP_SYS_ADMIN (fanotify_init) and OpenDir
//     CAP_DAC_READ_SEARCH (open_by_handle_at); a kernel or filesystem
//     that cannot report file handles is ErrUnsupported.
//   - The kernel merges events for the same entry while they wait in the
//     queue, so a reader that reads in intervals (and not after every
//     event) pays once per changed entry and interval, however many
//     writes a writer makes in between.
//   - The queue is bounded (16384 events). When it overflows, events are
//     lost and Read reports an Overflow event in their place: the reader
//     must then assume anything may have changed.
//   - A Watch is used by one goroutine; Close ends it.
package fanotify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is wrapped by Open's error when the kernel or the
// filesystem cannot watch a whole filesystem by file handles.
var ErrUnsupported = errors.New("fanotify cannot report file handles for this filesystem")

// Event masks a Watch can ask for (the kernel's FAN_* bits).
const (
	// Modify: an entry's data was written, truncated or allocated
	// (write, fallocate, truncate; not stores through a shared mapping).
	Modify = unix.FAN_MODIFY
	// CloseWrite: a file open for writing was closed.
	CloseWrite = unix.FAN_CLOSE_WRITE
	// Create: an entry was created in a directory.
	Create = unix.FAN_CREATE
	// MovedTo: an entry was renamed into a directory.
	MovedTo = unix.FAN_MOVED_TO
	// Delete: an entry was removed from a directory (its inode is freed
	// once its last link and open file are gone).
	Delete = unix.FAN_DELETE
	// OnDir asks for directory entries' events too (mkdir's Create).
	OnDir = unix.FAN_ONDIR
)

// Handle is a file handle as name_to_handle_at(2) makes it: an opaque
// key of an inode, stable while the inode lives.
type Handle struct {
	Type  int32
	Bytes []byte
}

// Key is the handle as a comparable value, for maps.
func (h Handle) Key() string { return strconv.Itoa(int(h.Type)) + ":" + string(h.Bytes) }

// Event is one change, or the loss of some (Overflow).
type Event struct {
	// Mask says what happened (Modify, CloseWrite, ...), merged over
	// every change to the entry since the last read.
	Mask uint64
	// Dir is the handle of the directory the entry is in, and Name the
	// entry's name in it (empty for events on a directory itself).
	Dir  Handle
	Name string
	// Overflow: the queue overflowed and events were lost.
	Overflow bool
	// fd is the event's descriptor: none (-1) in a group reporting
	// handles.
	fd int32
}

// queueOverflow is FAN_Q_OVERFLOW.
const queueOverflow = unix.FAN_Q_OVERFLOW

// Watch is a fanotify group with a mark on one filesystem.
type Watch struct {
	f *os.File
	// mount is the directory the watch was opened at: handles are
	// opened through its mount. Not O_PATH: open_by_handle_at refuses
	// such a descriptor (EBADF).
	mount int
	buf   []byte
}

// Open watches the whole filesystem holding dir for the events in mask,
// and keeps dir open to turn handles back into descriptors (OpenDir).
func Open(dir string, mask uint64) (*Watch, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_DFID_NAME|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			// Kernels before 5.9 refuse FAN_REPORT_DFID_NAME.
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("watching the filesystem of %s: fanotify_init: %w", dir, err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, mask, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ENODEV), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.EINVAL):
			// ENODEV/EOPNOTSUPP: the filesystem cannot encode
			// handles; EXDEV: dir is in a subvolume whose fsid
			// differs; EINVAL: a kernel without filesystem marks or
			// without one of the events in mask.
			err = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("watching the filesystem of %s: fanotify_mark: %w", dir, err)
	}
	mount, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watching the filesystem of %s: %w", dir, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	// A non-blocking descriptor in an os.File waits in Go's poller, so
	// that a deadline can end a Read.
	return &Watch{f: os.NewFile(uintptr(fd), "fanotify"), mount: mount, buf: make([]byte, 64<<10)}, nil
}

// Close ends the watch.
func (w *Watch) Close() error {
	unix.Close(w.mount)
	return w.f.Close()
}

// Read waits for events and returns those queued, or ctx's error.
func (w *Watch) Read(ctx context.Context) ([]Event, error) {
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Now()) })
	defer stop()
	n, err := w.f.Read(w.buf)
	if err != nil {
		if ctx.Err() != nil {
			w.f.SetReadDeadline(time.Time{})
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("reading fanotify events: %w", err)
	}
	events, err := parse(w.buf[:n])
	for _, e := range events {
		if e.fd >= 0 {
			// A group reporting handles gets no descriptors;
			// close one anyway rather than leak it.
			unix.Close(int(e.fd))
		}
	}
	return events, err
}

// OpenDir opens the directory of handle h (O_PATH). A directory removed
// since the event is unix.ESTALE.
func (w *Watch) OpenDir(h Handle) (int, error) {
	fd, err := unix.OpenByHandleAt(w.mount, unix.NewFileHandle(h.Type, h.Bytes), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("opening a directory by its handle: open_by_handle_at: %w", err)
	}
	return fd, nil
}
