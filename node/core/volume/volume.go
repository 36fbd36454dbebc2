// Package volume is the only code that knows what a Plinth volume looks like
// on disk. The provisioner, the resizer, the CSI node plugin and the
// standalone csi-serve controller all create, delete, grow and measure
// volumes through a Manager, so there is one tested implementation of the
// layout instead of one per caller.
//
// A filesystem volume is the directory data/volumes/<id>/ whose XFS (or
// ext4) project quota is exactly the volume's size. A block volume is the
// image file data/volumes/<id>.img, fully allocated with fallocate so a
// write to the device can never fail for lack of space. Paths come from
// node/core/localstorage; quotas from pkg/fsquota.
//
// Every mutating operation is idempotent and crash-safe. Before it touches
// the volumes directory it writes an intent record (data/state/operations/
// <id>) and it removes the record as its last step, so after a crash at any
// point the record says what was half done: Recover (and the next call for
// the same ID) undoes an interrupted Create, finishes an interrupted Delete
// and trims an interrupted Expand. A volume without a record is complete.
//
// Besides intents, a volume may have a lasting record (data/state/records/
// <id>) holding the reclaim policy its consumer last stated
// (SetReclaimPolicy). It is removed with the volume's data, never before,
// so a volume whose consumer object is gone still says whether its data is
// to be kept.
//
// Snapshots of volumes, and volumes made from a snapshot or another
// volume, are copy-on-write copies on the same data filesystem
// (snapshot.go, clone.go): crash-safe the same way, counted by the same
// space accounting.
//
// The room a filesystem volume was promised is free space as far as the
// filesystem knows; the node share (share.go) gives the node's other
// writers on the data filesystem (the kubelet's and containerd's
// directories) a quota of what no volume was promised, so that they
// cannot take it.
//
// Despite its path below node/kubernetes the package imports nothing from
// Kubernetes: it is plain Linux storage code that the Kubernetes-facing
// parts call.
package volume

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/keymutex"
	"source.plinth.dev/pkg/reflink"
)

// Sentinel errors. Every error a Manager returns for one of these conditions
// wraps the sentinel (test with errors.Is), so the CSI server maps them to
// gRPC codes and the controllers to Event reasons without parsing messages.
var (
	// ErrNotFound: no volume with that ID exists.
	ErrNotFound = errors.New("volume not found")
	// ErrExists: a volume with that ID exists with another mode or size.
	ErrExists = errors.New("volume exists with different parameters")
	// ErrInvalid: the request itself is malformed (bad ID, size, mode).
	ErrInvalid = errors.New("invalid volume request")
	// ErrNoSpace: the data filesystem cannot hold the volume.
	ErrNoSpace = errors.New("not enough space for volume")
	// ErrCapacityNotEnforced: a filesystem volume was requested but the
	// data filesystem cannot enforce its size and the operator has not
	// accepted unenforced capacity.
	ErrCapacityNotEnforced = errors.New("capacity of filesystem volumes cannot be enforced")
	// ErrInUse: the volume is still published (bind-mounted somewhere or
	// attached to a loop device), so deleting it would pull its data out
	// from under a user.
	ErrInUse = errors.New("volume is in use")
)

// Infeasible reports whether err means the request cannot be met as asked,
// so that repeating it unchanged is pointless: it is malformed (ErrInvalid),
// conflicts with an existing volume (ErrExists), does not fit (ErrNoSpace,
// ErrCapacityNotEnforced), or needs copies the data filesystem cannot make
// (ErrCopyUnsupported). Every other error (I/O, a cancelled context, a
// volume still in use) is transient. This is the one classification of
// volume errors: the provisioner and the resizer report an infeasible
// request and wait for it to change instead of retrying, and the CSI plugin
// answers it with a code that tells the caller not to retry unchanged.
func Infeasible(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrExists) ||
		errors.Is(err, ErrNoSpace) || errors.Is(err, ErrCapacityNotEnforced) ||
		errors.Is(err, ErrCopyUnsupported)
}

// Mode is a volume's access type.
type Mode int

const (
	// Filesystem volumes are directories with a project quota.
	Filesystem Mode = iota + 1
	// Block volumes are fully allocated image files served by loop devices.
	Block
)

func (m Mode) String() string {
	switch m {
	case Filesystem:
		return "filesystem"
	case Block:
		return "block"
	default:
		return fmt.Sprintf("mode(%d)", int(m))
	}
}

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "filesystem":
		return Filesystem, nil
	case "block":
		return Block, nil
	}
	return 0, fmt.Errorf("%w: unknown volume mode %q (want filesystem or block)", ErrInvalid, s)
}

// Alignment is the granularity of volume sizes: requests are rounded up to
// a multiple of it. A loop device exposes whole 512-byte sectors and direct
// I/O needs the backing filesystem's 4 KiB block alignment, and a quota
// limit below a whole block cannot be filled anyway, so 4 KiB is the
// smallest unit in which "exactly the requested size" is true for both
// modes. Kubernetes sizes (Mi, Gi, and most decimal ones) are multiples
// already.
const Alignment = 4096

// MaxBytes is the largest volume size accepted: well beyond any disk, and
// far enough below 2^63 that rounding and arithmetic cannot overflow.
const MaxBytes = int64(1) << 60

// Inode limits of filesystem volumes. A volume may hold one inode per 4 KiB
// of its size, and at least MinInodes. Inodes are not charged to the
// project's byte limit, so without an inode limit a volume full of empty
// files could exhaust the data filesystem's inodes for every other volume;
// at one per 4 KiB the uncharged inode metadata (512 bytes per XFS inode)
// stays below 1/8 of the volume's size. MinInodes keeps tiny volumes usable.
const (
	BytesPerInode = 4096
	MinInodes     = 4096
)

// InodeLimit is the inode limit of a filesystem volume of the given size.
func InodeLimit(bytes int64) uint64 {
	return max(uint64(bytes)/BytesPerInode, MinInodes)
}

// Project IDs handed to volumes. The range starts high so IDs an operator
// configured by hand in /etc/projects (conventionally small numbers) never
// collide with ours.
const (
	FirstProjectID uint32 = 1 << 20
	LastProjectID  uint32 = 1 << 30
)

// Manager creates, deletes, grows and measures volumes. Its exported fields
// are its dependencies; fill them in (or use New) before the first call and
// do not change them afterwards. A Manager is safe for concurrent use: calls
// for one volume ID are serialised, calls for different IDs run in parallel.
type Manager struct {
	// Data is the placed and created data tree (volumes/ and state/).
	Data *localstorage.DataDirectory
	// ProjectIDs allocates project IDs for filesystem volumes. It is nil
	// when project quotas are not enforced.
	ProjectIDs *fsquota.IDAllocator
	// QuotaError is nil when the data filesystem enforces project quotas
	// and otherwise says why not (from fsquota.Probe).
	QuotaError error
	// AllowUnenforced accepts filesystem volumes although QuotaError is
	// set. Their size is then recorded but not enforced.
	AllowUnenforced bool

	// reflinkErr is nil when the data filesystem makes copy-on-write
	// copies (snapshot.go), and otherwise says why not.
	reflinkErr error

	locks keymutex.Set
	// changes is signalled after each operation that may have changed
	// the data filesystem (see Changed).
	changes changes
	// spaceMu serialises the "is there room?" check of volumes with the
	// quota or allocation that claims the room, so two concurrent Creates
	// cannot both be promised the same free space, and with the node
	// share's limit (share.go), which follows the promise.
	spaceMu sync.Mutex
	// ledger bounds the room volumes and snapshots are promised, so that
	// a room check need not read every volume (ledger.go). Guarded by
	// spaceMu.
	ledger promiseLedger

	// dataIDMu guards dataID, the data directory's mark ("" until a
	// volume is made: see dataid.go).
	dataIDMu sync.Mutex
	dataID   string

	// clusterMu serialises reading and writing the cluster ID
	// (cluster.go).
	clusterMu sync.Mutex

	// share is the node share (share.go).
	share shareState

	// repairs holds the quota repairs made outside the audit until the
	// audit's reporter takes them (repairs.go).
	repairs repairs

	// debt records durable steps that failed (see durability.go).
	debt syncDebt

	// syncHook, when set (by tests), is called after each durable step
	// that succeeded, and after the sync that settles a debt; an error it
	// returns stands for the step's failure.
	syncHook func(step string) error

	// crashHook, when set (by tests), is called at the named points of
	// every multi-step operation. A test makes it panic to stop the
	// operation exactly as a crash would: no undo, no cleanup.
	crashHook func(point string)
}

func (m *Manager) crashPoint(point string) {
	if m.crashHook != nil {
		m.crashHook(point)
	}
}

// Config is what New needs.
type Config struct {
	// Data is the placed data tree; New creates it if needed.
	Data *localstorage.DataDirectory
	// QuotaError is the result of probing the volumes directory for
	// project quota support (fsquota.Probe); nil means enforced.
	QuotaError error
	// AllowUnenforced: see Manager.AllowUnenforced.
	AllowUnenforced bool
	// Share is the node share, set up by SetUpShare (share.go).
	Share NodeShare
}

// New returns a Manager over cfg.Data, creating the data tree and, when
// quotas are enforced, the project ID allocator over state/projects.
func New(cfg Config) (*Manager, error) {
	if cfg.Data == nil || !cfg.Data.Placed() {
		return nil, errors.New("creating volume manager: data directory not placed")
	}
	if err := cfg.Data.MkdirAll(); err != nil {
		return nil, fmt.Errorf("creating volume manager: %w", err)
	}
	// Whether a volume is in use (Delete refuses then) is read from the
	// mount table and the loop devices' backing files, which name resolved
	// paths: through a link, a mounted volume would look unused.
	vols := cfg.Data.Volumes.FullPath()
	if real, err := filepath.EvalSymlinks(vols); err != nil {
		return nil, fmt.Errorf("creating volume manager: %w", err)
	} else if real != vols {
		return nil, fmt.Errorf("creating volume manager: the volumes directory %s is reached through a symbolic link (it is %s), and the kernel names mounts and loop devices by the resolved path; place the data directory there (localstorage.Resolve)", vols, real)
	}
	if cfg.Share.Reserve < 0 {
		return nil, fmt.Errorf("creating volume manager: %w: node share reserve %d is negative", ErrInvalid, cfg.Share.Reserve)
	}
	m := &Manager{Data: cfg.Data, QuotaError: cfg.QuotaError, AllowUnenforced: cfg.AllowUnenforced}
	// Probed where snapshots are made, on the volumes' filesystem. A
	// failure is kept, not returned: volumes work without copies.
	m.reflinkErr = reflink.Probe(cfg.Data.Snapshots.FullPath())
	m.share.cfg = cfg.Share
	if cfg.QuotaError == nil {
		ids, err := fsquota.NewIDAllocator(cfg.Data.State.Projects.FullPath(), FirstProjectID, LastProjectID)
		if err != nil {
			return nil, fmt.Errorf("creating volume manager: %w", err)
		}
		m.ProjectIDs = ids
	}
	if err := m.loadDataID(); err != nil {
		return nil, fmt.Errorf("creating volume manager: %w", err)
	}
	return m, nil
}

// CapacityEnforced reports whether filesystem volumes get a real quota.
func (m *Manager) CapacityEnforced() bool { return m.QuotaError == nil }

// UnenforcedCapacity says, when filesystem volumes get no real quota, why
// (reason, nil when they do) and whether the operator accepted that
// (allowed), i.e. whether Create makes them anyway or refuses them.
func (m *Manager) UnenforcedCapacity() (reason error, allowed bool) {
	return m.QuotaError, m.AllowUnenforced
}

// AllowUnenforcedCapacityFlag is plinth-node's flag that accepts
// filesystem volumes without an enforced size (Config.AllowUnenforced).
// The refusal names it, so that whoever reads it knows what to change.
const AllowUnenforcedCapacityFlag = "--allow-unenforced-capacity"

// checkFilesystemAllowed refuses filesystem volumes whose size could not be
// enforced, unless the operator accepted that.
func (m *Manager) checkFilesystemAllowed() error {
	if m.QuotaError == nil || m.AllowUnenforced {
		return nil
	}
	return fmt.Errorf("%w: %v; fix the data filesystem, or pass %s to provision without size enforcement",
		ErrCapacityNotEnforced, m.QuotaError, AllowUnenforcedCapacityFlag)
}

// alignSize validates a requested size and rounds it up to Alignment.
func alignSize(bytes int64) (int64, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("%w: size %d bytes is not positive", ErrInvalid, bytes)
	}
	if bytes > MaxBytes {
		return 0, fmt.Errorf("%w: size %d bytes is larger than the maximum %d", ErrInvalid, bytes, MaxBytes)
	}
	return (bytes + Alignment - 1) / Alignment * Alignment, nil
}

// AlignSize returns the size a volume requested with bytes will really
// have, or an error wrapping ErrInvalid.
func AlignSize(bytes int64) (int64, error) { return alignSize(bytes) }

// ValidateID checks a volume ID (see localstorage.ValidateVolumeID); its
// errors wrap both ErrInvalid and localstorage.ErrInvalidName.
func ValidateID(id string) error {
	if err := localstorage.ValidateVolumeID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
