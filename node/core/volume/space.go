package volume

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
)

// How volumes count against the data filesystem. This is the one
// accounting of space on a node: Create and Expand refuse what does not
// fit under it, and the capacity a node publishes to the scheduler
// (Space.Available) is computed by it, so the scheduler never sends a
// claim to a node whose provisioner would refuse it, and the reverse.
//
//   - A block volume is an image allocated in full when it is made: it
//     takes its whole size from the free space at once. A pod that
//     discards part of the device (mkfs does by default, so do fstrim and
//     a discard mount) makes the loop driver punch holes in the image,
//     which the filesystem then reports free; those parts stay promised
//     to the volume (Space.Unallocated), whatever the over-commit, so that
//     the pod's later writes into them find room.
//   - A filesystem volume with a project quota is thick by default: the
//     part of its limit it has not used yet (limit minus usage) is
//     promised to it, and is not available to new volumes, although the
//     filesystem still reports it free. As the volume fills, its data takes
//     from the free space exactly what leaves the promise, so writes into
//     volumes do not change what a new volume can get.
//   - A filesystem volume without quota (the operator allowed unenforced
//     capacity) promises nothing that can be measured: only what it has
//     written counts, through the free space.
//   - A copy-on-write copy (a snapshot, or a volume made from a snapshot
//     or another volume: snapshot.go, clone.go) shares its source's
//     blocks: it takes no free space when it is made, but once either
//     side overwrites what they share, the writer needs new blocks. So
//     each copy's shared bytes count as promised, like a thick volume's
//     unused room: a snapshot's what its data held when it was made
//     (Snapshot.ReservedBytes), a volume copy's what it shared with its
//     source (copyXattr). A fully allocated block volume therefore never
//     fails a write because a snapshot holds its old blocks. The
//     reservation is not reduced as the two sides diverge (finding out
//     which blocks are still shared costs a walk of every extent): it
//     errs on the side of room kept. Over-commit lends it out like any
//     other promised room.
//   - The node share (share.go: the kubelet's, containerd's and the pods'
//     logs' directories on a booted node) has a reserve, which counts like
//     a thick filesystem volume of that size: the part its files do not
//     fill yet (Space.ShareReserve) is not available to volumes. Beyond
//     its reserve the share gets what no volume was promised, by a quota
//     that follows the promise.
//   - The engine's own state (intent records, records, the data-id) has
//     a reserve too (StateReserve) that is never promised to a volume nor
//     to the share, so that Delete, which writes an intent record first,
//     works on a node its volumes filled.
//
// A volume may be made with over-commit (Overcommit, WithOvercommit; a
// StorageClass asks for it with a parameter): with ratio r, a new volume of that class
// needs only 1/r of the promised room to stay free. Repeated to the end,
// the unused limits of filesystem volumes then add up to nearly r times the
// free space: thin provisioning, where a volume may hit ENOSPC before its
// limit when its neighbours fill up. Over-commit is a risk for the whole
// node, not only for the class that takes it: the room it lends was
// promised to volumes of every class. The default (1) never over-commits.
// Expansions never over-commit.

// Overcommit is the ratio by which a new volume may over-commit the
// room promised to filesystem volumes; NoOvercommit (1) reserves it all.
type Overcommit float64

// NoOvercommit is the default: every byte promised stays reserved.
const NoOvercommit Overcommit = 1

// MaxOvercommit bounds the ratio: beyond it, the promise of a limit means
// nothing, and a class that wants that should say so with a number that
// reads as a mistake rather than pass one by accident.
const MaxOvercommit Overcommit = 100

// ParseOvercommit reads an over-commit ratio written as a decimal number
// ("1", "1.5", "4"), from 1 to MaxOvercommit. Errors wrap ErrInvalid.
func ParseOvercommit(s string) (Overcommit, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < float64(NoOvercommit) || f > float64(MaxOvercommit) {
		return 0, fmt.Errorf("%w: over-commit ratio %q is not a number from 1 (no over-commit) to %g", ErrInvalid, s, float64(MaxOvercommit))
	}
	return Overcommit(f), nil
}

// WithOvercommit lets Create over-commit the room promised to filesystem
// volumes by ratio r (see Overcommit). A ratio below 1 is taken as 1.
func WithOvercommit(r Overcommit) CreateOption {
	return func(o *createOptions) { o.overcommit = max(r, NoOvercommit) }
}

// CreateOverhead is what Create itself writes to the data filesystem
// before it checks for room (the intent record; the image's inode or the
// volume's directory, which on XFS may allocate a whole inode chunk).
// Available leaves it out, so that a volume of the size it reports really
// fits; a request up to this much larger may fit as well.
const CreateOverhead = 64 << 10

// StateReserve is free space never promised to volumes or the node
// share: room for the engine's own state writes (intent records, records,
// the data-id, their temporary files and renames). Without it, a volume
// of exactly Available, written full, left the data filesystem without a
// block for the intent record that Delete must write before it removes
// anything, so the one operation that frees room failed with ENOSPC.
//
// A reserve rather than preallocated intent files: every state write goes
// through the same atomic create-and-rename (localstorage.WriteAtomic),
// which needs a new inode and data block whatever was preallocated, and a
// rewrite in place would give up its atomicity. A reserve covers them all.
//
// Its size: a new XFS inode may allocate a whole inode chunk (64 inodes of
// 512 bytes, 32 KiB), the operations directory may grow a block (4 KiB) and
// its btree split, and each record takes a block; XFS also keeps part of
// the free space from allocations for its free-space btrees as it fills
// (the per-AG reserve) and allocates in 4 KiB blocks. A few records and
// their chunk come to far less than one MiB; one MiB leaves room for
// several operations in flight at once and costs nothing a volume would
// miss. Over-commit never lends it (Space.reserved does not count it).
const StateReserve = 1 << 20

// Space is the state of the data filesystem the accounting starts from.
type Space struct {
	// Free is what the data filesystem reports available to its users.
	Free int64
	// Promised is the room filesystem volumes may still fill (the sum of
	// their limits minus their usage; zero when quotas are not enforced),
	// plus what copy-on-write copies reserve for the blocks they share.
	Promised int64
	// Unallocated is the part of block images not allocated on the data
	// filesystem (holes their pods' discards punched): free space that
	// is a block volume's all the same.
	Unallocated int64
	// ShareUsed is what the node share's files hold, and ShareReserve
	// the part of its reserve they do not fill yet: room no volume may
	// be promised. Both zero without a share.
	ShareUsed, ShareReserve int64
}

// Available is the size of the largest new volume, of either mode, that
// fits under over-commit ratio r: the free space less the part of the
// promised room that r keeps reserved, less the unallocated parts of block
// images, less the node share's unused reserve, less StateReserve and less
// CreateOverhead,
// rounded down to Alignment so that a request of exactly this size (which
// Create rounds up) still fits.
func (s Space) Available(r Overcommit) int64 {
	n := s.room(r) - CreateOverhead
	return max(n/Alignment*Alignment, 0)
}

// room is how many more bytes of any volume fit under over-commit ratio
// r (Available before its rounding and CreateOverhead).
func (s Space) room(r Overcommit) int64 {
	return s.Free - s.reserved(r) - s.Unallocated - s.ShareReserve - StateReserve
}

// reserved is the promised room that r keeps from new volumes, rounded up.
func (s Space) reserved(r Overcommit) int64 {
	r = max(r, NoOvercommit)
	return int64(math.Ceil(float64(s.Promised) / float64(r)))
}

// Space measures the data filesystem: one statfs and, when quotas are
// enforced, one quota read per filesystem volume. It takes no locks: a
// Create running meanwhile may or may not be counted, which is why Create
// checks again under its own lock.
func (m *Manager) Space(ctx context.Context) (Space, error) {
	if err := ctx.Err(); err != nil {
		return Space{}, fmt.Errorf("measuring space: %w", err)
	}
	return m.space()
}

func (m *Manager) space() (Space, error) {
	// The share's usage first: a share write between the two reads then
	// counts in neither, which leaves its limit (fitShare) smaller.
	used, reserve, err := m.shareUsed()
	if err != nil {
		return Space{}, err
	}
	free, err := m.freeBytes()
	if err != nil {
		return Space{}, err
	}
	s := Space{Free: free, ShareUsed: used, ShareReserve: max(reserve-used, 0)}
	s.Promised, s.Unallocated, err = m.promisedBytes()
	if err != nil {
		return Space{}, err
	}
	return s, nil
}

// freeBytes is the free space of the data filesystem, as a writer
// without the filesystem's root reserve gets it. It is read on the
// volumes directory, which carries no project ID: statfs on a volume's
// directory reports its quota instead (XFS and ext4 do so for a directory
// with PROJINHERIT).
func (m *Manager) freeBytes() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(m.Data.Volumes.FullPath(), &st); err != nil {
		return 0, fmt.Errorf("checking free space: %w", err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// checkSpace fails with ErrNoSpace when size more bytes of any volume do
// not fit under over-commit ratio r (see Space.Available; a block image
// allocated up front may not take promised room either, or a thick
// filesystem volume could not be filled). Callers hold spaceMu (through
// promise, which fits the node share around the check). The ledger's
// bound decides first, without reading any volume (promiseLedger); only
// when it does not is the promise measured.
func (m *Manager) checkSpace(size int64, r Overcommit) error {
	if fits, err := m.fitsBound(size, r); err == nil && fits {
		return nil
	}
	s, err := m.space()
	if err != nil {
		return err
	}
	if size > s.room(r) {
		over := ""
		if r > NoOvercommit {
			over = fmt.Sprintf(" (with over-commit %g, %s of them stay reserved)", float64(r), formatBytes(s.reserved(r)))
		}
		holes := ""
		if s.Unallocated > 0 {
			holes = fmt.Sprintf(", and %s to block volumes whose pods discarded them", formatBytes(s.Unallocated))
		}
		if s.ShareReserve > 0 {
			holes += fmt.Sprintf(", and %s to the node's reserve for its images, logs and emptyDirs", formatBytes(s.ShareReserve))
		}
		return fmt.Errorf("%w: %s requested, %s free on the data filesystem, of which %s are promised to existing filesystem volumes and snapshots%s%s, and %s kept for the engine's own records",
			ErrNoSpace, formatBytes(size), formatBytes(s.Free), formatBytes(s.Promised), over, holes, formatBytes(StateReserve))
	}
	return nil
}

// promisedBytes sums, over filesystem volumes (in use or quarantined), the
// part of their quota they have not used yet (where quotas are enforced),
// over block volumes the part of their image that is not allocated, and
// the bytes copies and snapshots keep reserved for the blocks they share.
func (m *Manager) promisedBytes() (promised, unallocated int64, err error) {
	// Quarantined volumes keep their promise: a restored one must find
	// its room (quarantine.go).
	for _, dir := range []*localstorage.VolumesDirectory{&m.Data.Volumes, &m.Data.Quarantine} {
		p, u, err := m.promisedIn(dir)
		if err != nil {
			return 0, 0, err
		}
		promised, unallocated = promised+p, unallocated+u
	}
	snaps, err := m.snapshotsReserved()
	if err != nil {
		return 0, 0, fmt.Errorf("checking free space: %w", err)
	}
	return promised + snaps, unallocated, nil
}

// promisedIn is promisedBytes over the volumes in dir.
func (m *Manager) promisedIn(dir *localstorage.VolumesDirectory) (promised, unallocated int64, err error) {
	entries, err := dir.List()
	if err != nil {
		return 0, 0, fmt.Errorf("checking free space: %w", err)
	}
	enforced := m.CapacityEnforced()
	for _, e := range entries {
		if e.Kind == localstorage.VolumeBlock {
			img, err := dir.Block(e.ID)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			if err := unix.Stat(img.FullPath(), &st); err != nil {
				continue // removed meanwhile
			}
			unallocated += imageHoles(&st)
			promised += copyReserve(img.FullPath())
			continue
		}
		if e.Kind == localstorage.VolumeFilesystem {
			if vol, err := dir.Filesystem(e.ID); err == nil {
				promised += copyReserve(vol.FullPath())
			}
		}
		if e.Kind != localstorage.VolumeFilesystem || !enforced {
			continue
		}
		vol, err := dir.Filesystem(e.ID)
		if err != nil {
			continue
		}
		q, err := fsquota.GetQuota(vol.FullPath())
		if err != nil {
			// A directory without quota (or one removed meanwhile)
			// promises nothing measurable.
			continue
		}
		if q.Limits.Bytes > q.UsedBytes {
			promised += int64(q.Limits.Bytes - q.UsedBytes)
		}
	}
	return promised, unallocated, nil
}

// copyReserve is what a volume made as a copy (its directory or image at
// path) keeps reserved for the blocks it shares (copyXattr): 0 for a
// volume that is no copy, or whose record cannot be read.
func copyReserve(path string) int64 {
	_, shared, err := readCopyXattr(path)
	if err != nil {
		return 0
	}
	return shared
}

// imageHoles is how much of an image file (its stat) is not allocated:
// its size less the blocks it holds, or 0 when it holds them all (or
// more: metadata blocks, preallocation past the end).
func imageHoles(st *unix.Stat_t) int64 {
	return max(st.Size-st.Blocks*512, 0)
}
