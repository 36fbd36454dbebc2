package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// Info describes an existing volume.
type Info struct {
	ID   string
	Mode Mode
	// CapacityBytes is the volume's size: the project quota's byte limit
	// of a filesystem volume (its recorded size when capacity is not
	// enforced), the image size of a block volume.
	CapacityBytes int64
}

// DefaultRootDirMode is the mode of a filesystem volume's root directory
// unless Create is given another (WithRootDirMode): world-writable, like
// local-path volumes and like a fresh disk's root as a container sees it,
// so that pods running as any user can write, with or without an fsGroup.
// Only root can reach the volumes directory itself (0700), so this opens
// the directory to the pods that mount it and to nobody else. With the
// CSIDriver's fsGroupPolicy File the kubelet narrows ownership when a pod
// asks for an fsGroup (group of the root set to it, group rwx and setgid
// added); it never takes permissions away, which is why a stricter mode
// has to be chosen at creation.
const DefaultRootDirMode fs.FileMode = 0o777

// CreateOption adjusts what Create makes.
type CreateOption func(*createOptions)

type createOptions struct {
	rootDirMode fs.FileMode
	overcommit  Overcommit
	// source, when set, is what the volume is a copy of (clone.go).
	source *copySource
}

// WithRootDirMode makes a filesystem volume's root directory mode perm
// instead of DefaultRootDirMode: 0770, say, lets only root and (once the
// kubelet applies a pod's fsGroup) that group write. Only permission bits
// are accepted (see ParseRootDirMode); a block volume, which has no
// directory, refuses the option with ErrInvalid.
func WithRootDirMode(perm fs.FileMode) CreateOption {
	return func(o *createOptions) { o.rootDirMode = perm }
}

// rootDirModeSyntax is an octal mode of three digits, with an optional
// leading zero ("770", "0770").
var rootDirModeSyntax = regexp.MustCompile(`^0?[0-7]{3}$`)

// ParseRootDirMode reads a root directory mode written as the octal
// number chmod takes ("0770" or "770"). Only the nine permission bits can
// be given: setuid means nothing on a directory, setgid is what the
// kubelet adds itself when a pod asks for an fsGroup (and only then is it
// useful), and sticky matters only for a directory many users share,
// which is what a stricter mode exists to prevent. Errors wrap ErrInvalid.
func ParseRootDirMode(s string) (fs.FileMode, error) {
	if !rootDirModeSyntax.MatchString(s) {
		return 0, fmt.Errorf("%w: root directory mode %q is not an octal permission mode such as 0770 (three octal digits, optionally after a 0; no setuid, setgid or sticky bit)", ErrInvalid, s)
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: root directory mode %q: %w", ErrInvalid, s, err)
	}
	return fs.FileMode(n), nil
}

// FormatRootDirMode writes a mode the way ParseRootDirMode reads it, with
// four digits ("0770").
func FormatRootDirMode(perm fs.FileMode) string {
	return fmt.Sprintf("%04o", uint32(perm))
}

// Create makes volume id of the given mode and size (rounded up to
// Alignment) and returns it. A filesystem volume's root directory gets
// DefaultRootDirMode, or the mode given WithRootDirMode.
//
// It is idempotent: if the volume already exists with the same mode and
// size, Create returns it; with another mode or size it fails with
// ErrExists and touches nothing. A Create interrupted by a crash left an
// intent record, and the next Create (or Recover) removes the partial volume
// first, so every successful Create returns a volume that was completely
// made. On failure (ErrNoSpace for a full disk, among others) nothing of
// the volume is left behind. The root directory's mode is set when the
// volume is made and not compared by later calls: the kubelet (applying
// an fsGroup) and the pods themselves may change it afterwards. With
// FromSnapshot or FromVolume the volume is made as a copy (clone.go); one
// that exists already is returned only if it was made from that source.
func (m *Manager) Create(ctx context.Context, id string, mode Mode, bytes int64, opts ...CreateOption) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
	}
	if err := ValidateID(id); err != nil {
		return Info{}, fmt.Errorf("creating volume: %w", err)
	}
	defer m.changes.signal()
	size, err := alignSize(bytes)
	if err != nil {
		return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
	}
	o, err := m.createOptionsFor(mode, opts)
	if err == nil {
		err = o.source.check(m, id, o)
	}
	if err != nil {
		return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
	}

	unlock := m.locks.Lock(append(o.source.lockKeys(), id)...)
	defer unlock()
	// A volume in quarantine is this ID's data: its consumer is back
	// (quarantine.go), and gets it rather than an empty volume beside it.
	if _, err := m.restore(id); err != nil {
		return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
	}
	cur, err := m.current(id)
	switch {
	case err == nil:
		if cur.Mode == mode && cur.CapacityBytes == size {
			if err := o.source.matches(m, cur); err != nil {
				return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
			}
			return cur, nil
		}
		return Info{}, fmt.Errorf("creating %v volume %s of %d bytes: %w: it is a %v volume of %d bytes",
			mode, id, size, ErrExists, cur.Mode, cur.CapacityBytes)
	case !errors.Is(err, ErrNotFound):
		return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
	}
	if err := m.build(id, mode, size, o); err != nil {
		return Info{}, fmt.Errorf("creating volume %s: %w", id, err)
	}
	return Info{ID: id, Mode: mode, CapacityBytes: size}, nil
}

// applyCreateOptions applies opts to the defaults.
func applyCreateOptions(opts []CreateOption) createOptions {
	o := createOptions{rootDirMode: DefaultRootDirMode, overcommit: NoOvercommit}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// createOptionsFor applies opts to the defaults and checks them against
// mode, and that the data directory takes volumes of that mode; errors
// wrap ErrInvalid, or say why filesystem volumes are refused.
func (m *Manager) createOptionsFor(mode Mode, opts []CreateOption) (createOptions, error) {
	o := applyCreateOptions(opts)
	switch mode {
	case Filesystem:
		if err := m.checkFilesystemAllowed(); err != nil {
			return o, err
		}
		if o.rootDirMode&^fs.ModePerm != 0 {
			return o, fmt.Errorf("%w: root directory mode %v has more than permission bits", ErrInvalid, o.rootDirMode)
		}
	case Block:
		if o.rootDirMode != DefaultRootDirMode {
			return o, fmt.Errorf("%w: a block volume has no root directory to give mode %s", ErrInvalid, FormatRootDirMode(o.rootDirMode))
		}
	default:
		return o, fmt.Errorf("%w: unknown mode %v", ErrInvalid, mode)
	}
	return o, nil
}

// build makes volume id, which does not exist, between an intent record
// and its removal. A failure is undone at once rather than at the next
// start: the caller will report the error and may never ask again. If
// undoing fails too, the intent record stays and Recover finishes the
// job. Callers hold id's lock.
func (m *Manager) build(id string, mode Mode, size int64, o createOptions) error {
	if err := m.markUsed(); err != nil {
		return err
	}
	if err := m.writeIntent(id, intent{Op: OpCreate, Mode: mode.String(), Bytes: size}); err != nil {
		return err
	}
	m.crashPoint("create:intent")
	// A record left by an earlier volume of this ID (removed by hand) does
	// not describe the new one.
	if err := m.removeRecord(id); err != nil {
		return err
	}
	var err error
	switch {
	case o.source != nil:
		err = m.createCopy(id, mode, size, o)
	case mode == Filesystem:
		err = m.createFilesystem(id, size, o.rootDirMode, o.overcommit)
	default:
		err = m.createBlock(id, size, o.overcommit)
	}
	if err != nil {
		if uerr := m.remove(id, 0, true); uerr != nil {
			return fmt.Errorf("%w (and removing the partial volume failed: %v; it will be retried)", err, uerr)
		}
		if cerr := m.clearIntent(id); cerr != nil {
			return fmt.Errorf("%w (and %v)", err, cerr)
		}
		return err
	}
	m.crashPoint("create:done")
	return m.clearIntent(id)
}

// current returns volume id as it is once the data filesystem owes no
// sync (settleDebt) and any operation on id a crash interrupted is
// finished (settle): complete, or ErrNotFound. Callers hold id's lock.
func (m *Manager) current(id string) (Info, error) {
	if err := m.settleDebt(); err != nil {
		return Info{}, err
	}
	if err := m.settle(id); err != nil {
		return Info{}, err
	}
	return m.describe(id)
}

// settle finishes an operation on id that a crash interrupted, if any.
// Callers hold id's lock.
func (m *Manager) settle(id string) error {
	in, err := m.readIntent(id)
	if err != nil || in == nil {
		return err
	}
	return m.finish(id, in)
}

// createFilesystem makes the volume directory, of mode perm, with its
// quota (or, when capacity is not enforced, with its size recorded in an
// xattr).
func (m *Manager) createFilesystem(id string, size int64, perm fs.FileMode, r Overcommit) error {
	dir, err := m.Data.Volumes.Filesystem(id)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	path := dir.FullPath()

	release, err := m.promise(id, size, r)
	if err != nil {
		return err
	}
	defer release()
	if err := os.Mkdir(path, 0o700); err != nil {
		return classifySpace(fmt.Errorf("creating volume directory: %w", err))
	}
	// The mode (see DefaultRootDirMode) is set by chmod because mkdir's is
	// filtered by the umask.
	if err := os.Chmod(path, perm); err != nil {
		return fmt.Errorf("setting mode of volume directory: %w", err)
	}
	m.crashPoint("create:mkdir")
	if m.CapacityEnforced() {
		if m.ProjectIDs == nil {
			return errors.New("quotas are enforced but the manager has no project ID allocator")
		}
		pid, err := m.ProjectIDs.Allocate(id)
		if err != nil {
			return fmt.Errorf("allocating project ID: %w", err)
		}
		m.crashPoint("create:project-id")
		if err := fsquota.SetQuota(path, pid, fsquota.Limits{Bytes: uint64(size), Inodes: InodeLimit(size)}); err != nil {
			// remove() finds no project ID on the directory, so hand
			// the claim back here.
			if rerr := m.ProjectIDs.Release(pid, id); rerr != nil {
				return fmt.Errorf("%w (and releasing project ID %d: %v)", err, pid, rerr)
			}
			return classifySpace(err)
		}
	}
	// The size is recorded also where a quota holds it, so that a quota
	// changed behind Plinth's back is found (Stat).
	if err := setRecordedCapacity(path, size); err != nil {
		return err
	}
	return m.durable("create:volumes-dir", m.Data.Volumes.Sync())
}

// createBlock makes the fully allocated image file.
func (m *Manager) createBlock(id string, size int64, r Overcommit) error {
	img, err := m.Data.Volumes.Block(id)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// O_EXCL: an image we did not create in this call is never reused.
	f, err := os.OpenFile(img.FullPath(), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return classifySpace(fmt.Errorf("creating image file: %w", err))
	}
	defer f.Close()
	m.crashPoint("create:image")
	release, err := m.promise(id, size, r)
	if err != nil {
		return err
	}
	defer release()
	if err := fallocate(f, 0, size); err != nil {
		return classifySpace(fmt.Errorf("allocating %d bytes for the image: %w", size, err))
	}
	if err := m.durable("create:image", f.Sync()); err != nil {
		return fmt.Errorf("syncing image file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing image file: %w", err)
	}
	return m.durable("create:volumes-dir", m.Data.Volumes.Sync())
}

// classifySpace makes out-of-space errors match ErrNoSpace (EFBIG: larger
// than the filesystem allows a file to be).
func classifySpace(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}

// formatBytes renders a byte count for people, in the binary units
// Kubernetes quantities use (4 MiB rather than 4194304 bytes), with one
// decimal where the value is not whole.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[i]
}
