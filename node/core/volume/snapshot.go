package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/reflink"
)

// Snapshots are copy-on-write copies of a volume's data, kept in
// data/snapshots/<id>/ (localstorage.SnapshotDirectory) on the volumes'
// filesystem, which must share extents between files (XFS with reflink=1,
// the default of mkfs.xfs since xfsprogs 5.1):
//
//   - A block volume's snapshot is one FICLONE of its image: the image as
//     it was at one instant, what a power cut at that instant would have
//     left on the device (crash-consistent). It takes no data blocks and
//     a time independent of the volume's size.
//   - A filesystem volume's snapshot is its tree copied entry by entry
//     (reflink.CopyTree), each regular file by one FICLONE: every file is
//     copied at one instant, but the files at different instants, so a
//     writer changing several files during the copy may find some of its
//     changes in the snapshot and not others. Freezing the filesystem
//     (FIFREEZE) would make the copy atomic, but it freezes every volume
//     and the node's own writers on the data filesystem, which is not a
//     price one volume's snapshot may charge. Applications that need
//     several files to agree quiesce themselves (or use a block volume).
//   - Hard links within the volume stay hard links; ownership, modes,
//     extended attributes and times are kept; project IDs are not (the
//     snapshot's files are charged to no project, and a volume made from
//     it charges them to its own).
//
// A snapshot's record (state, source, sizes, creation time) is written
// before its data, saying "creating", and rewritten "ready" as the last
// step; deletion rewrites it "deleting" before it removes the data and
// removes it last. So after a crash at any point a snapshot directory
// whose record does not say "ready" is a half-made or half-deleted
// snapshot: never reported, and removed by Recover or by the next call
// for its ID. A snapshot directory is touched only under the lock of its
// ID (snapshotKey), taken in one Lock call with the volume it is copied
// from or to, so lock order cannot deadlock.

// ErrCopyUnsupported: the data filesystem cannot make copy-on-write copies
// (no reflink), so snapshots, and volumes made from a snapshot or another
// volume, are refused. Volumes themselves work as before.
var ErrCopyUnsupported = errors.New("snapshots and clones need a data filesystem with reflink (XFS made with reflink=1)")

// Snapshot is a complete snapshot of a volume.
type Snapshot struct {
	ID string
	// SourceVolumeID is the volume the snapshot was made of (which may
	// have been deleted since).
	SourceVolumeID string
	Mode           Mode
	// SizeBytes is the source volume's size when the snapshot was made:
	// the least size of a volume made from it (CSI's restore size).
	SizeBytes int64
	// ReservedBytes is what the snapshot's data holds on the data
	// filesystem, shared with its source until either is overwritten, and
	// what the space accounting keeps reserved for it (see space.go).
	ReservedBytes int64
	CreatedAt     time.Time
	// ReadyToUse is true for every snapshot the Manager reports: it is
	// made in one call, and a snapshot not yet complete is not reported.
	ReadyToUse bool
}

type snapshotState string

const (
	snapshotCreating snapshotState = "creating"
	snapshotReady    snapshotState = "ready"
	snapshotDeleting snapshotState = "deleting"
)

// snapshotRecord is snapshots/<id>/record.
type snapshotRecord struct {
	State          snapshotState `json:"state"`
	SourceVolumeID string        `json:"sourceVolumeID"`
	Mode           string        `json:"mode"`
	SizeBytes      int64         `json:"sizeBytes"`
	// ReservedBytes is an estimate while the snapshot is made (its
	// source's usage), and what it holds once it is ready.
	ReservedBytes int64     `json:"reservedBytes"`
	CreatedAt     time.Time `json:"createdAt"`
}

func (r *snapshotRecord) snapshot(id string) (Snapshot, error) {
	mode, err := ParseMode(r.Mode)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{ID: id, SourceVolumeID: r.SourceVolumeID, Mode: mode, SizeBytes: r.SizeBytes,
		ReservedBytes: r.ReservedBytes, CreatedAt: r.CreatedAt, ReadyToUse: r.State == snapshotReady}, nil
}

// ValidateSnapshotID checks a snapshot ID (localstorage.ValidateSnapshotID);
// its errors wrap both ErrInvalid and localstorage.ErrInvalidName.
func ValidateSnapshotID(id string) error {
	if err := localstorage.ValidateSnapshotID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// snapshotKey is the lock key of snapshot id: volume IDs cannot contain
// "/", so it never names a volume.
func snapshotKey(id string) string { return "snapshot/" + id }

// snapshotIDOf is the snapshot ID of a snapshotKey, and false for any
// other key (a volume's ID has no "/").
func snapshotIDOf(key string) (string, bool) { return strings.CutPrefix(key, "snapshot/") }

// CopyOnWriteError is nil when the data filesystem makes copy-on-write
// copies, and otherwise says why not: snapshots and volumes made from a
// copy are then refused with ErrCopyUnsupported.
func (m *Manager) CopyOnWriteError() error { return m.reflinkErr }

func (m *Manager) checkCopyOnWrite() error {
	if m.reflinkErr != nil {
		return fmt.Errorf("%w: %v", ErrCopyUnsupported, m.reflinkErr)
	}
	return nil
}

// CreateSnapshot makes snapshot snapshotID of volume volumeID and returns
// it. It is idempotent: a snapshot of that ID made of that volume is
// returned as it is; one made of another volume is ErrExists. A missing
// volume is ErrNotFound, a data filesystem without reflink
// ErrCopyUnsupported, and a snapshot that does not fit under the space
// accounting (it reserves what it holds) ErrNoSpace. On failure nothing of
// the snapshot is left.
//
// Of the options, only WithOvercommit applies: the snapshot's reservation
// may then take room promised to filesystem volumes and other copies, as
// a volume of that ratio may (the user's choice to share, from a
// VolumeSnapshotClass); any other is ErrInvalid.
//
// The volume is locked while it is copied: it cannot be deleted or grown
// meanwhile, and Stat waits. For a block volume that is one FICLONE; for a
// filesystem volume it is a walk of its tree, whose time grows with the
// number of its files, not their size.
func (m *Manager) CreateSnapshot(ctx context.Context, volumeID, snapshotID string, opts ...CreateOption) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("creating snapshot %s: %w", snapshotID, err)
	}
	o, err := snapshotOptions(opts)
	if err != nil {
		return Snapshot{}, fmt.Errorf("creating snapshot %s: %w", snapshotID, err)
	}
	if err := ValidateSnapshotID(snapshotID); err != nil {
		return Snapshot{}, fmt.Errorf("creating snapshot: %w", err)
	}
	if err := ValidateID(volumeID); err != nil {
		return Snapshot{}, fmt.Errorf("creating snapshot %s: %w", snapshotID, err)
	}
	defer m.changes.signal()
	unlock := m.locks.Lock(snapshotKey(snapshotID), volumeID)
	defer unlock()
	s, err := m.settledSnapshotDir("creating snapshot", snapshotID)
	if err != nil {
		return Snapshot{}, err
	}
	cur, err := m.currentSnapshot(s)
	switch {
	case err == nil && cur.SourceVolumeID == volumeID:
		return cur, nil
	case err == nil:
		return Snapshot{}, fmt.Errorf("creating snapshot %s of volume %s: %w: it is a snapshot of volume %s", snapshotID, volumeID, ErrExists, cur.SourceVolumeID)
	case !errors.Is(err, ErrNotFound):
		return Snapshot{}, fmt.Errorf("creating snapshot %s: %w", snapshotID, err)
	}
	if err := m.checkCopyOnWrite(); err != nil {
		return Snapshot{}, fmt.Errorf("creating snapshot %s: %w", snapshotID, err)
	}
	vol, err := m.current(volumeID)
	if err != nil {
		return Snapshot{}, fmt.Errorf("creating snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	snap, err := m.takeSnapshot(ctx, s, vol, o.overcommit)
	if err != nil {
		if rerr := m.removeSnapshot(s); rerr != nil {
			return Snapshot{}, fmt.Errorf("creating snapshot %s of volume %s: %w (and removing the partial snapshot failed: %v; it will be retried)", snapshotID, volumeID, err, rerr)
		}
		return Snapshot{}, fmt.Errorf("creating snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	return snap, nil
}

// snapshotOptions reads CreateSnapshot's options: over-commit, and
// nothing else.
func snapshotOptions(opts []CreateOption) (createOptions, error) {
	o := applyCreateOptions(opts)
	if o.rootDirMode != DefaultRootDirMode || o.source != nil {
		return o, fmt.Errorf("%w: a snapshot takes only an over-commit ratio, not a root directory mode or a source", ErrInvalid)
	}
	return o, nil
}

// takeSnapshot copies volume vol into the snapshot directory s, which does
// not exist, reserving what it shares under over-commit ratio r. Callers
// hold both locks and remove s on failure.
func (m *Manager) takeSnapshot(ctx context.Context, s localstorage.SnapshotDirectory, vol Info, r Overcommit) (Snapshot, error) {
	fsPath, imgPath := m.paths(vol.ID)
	estimate, err := m.heldBytes(vol, fsPath, imgPath)
	if err != nil {
		return Snapshot{}, err
	}
	rec := snapshotRecord{State: snapshotCreating, SourceVolumeID: vol.ID, Mode: vol.Mode.String(),
		SizeBytes: vol.CapacityBytes, ReservedBytes: estimate, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if err := m.startSnapshot(s, rec, r); err != nil {
		return Snapshot{}, err
	}
	m.crashPoint("snapshot:intent")
	if vol.Mode == Block {
		rec.ReservedBytes, err = m.cloneImage(s.Image.FullPath(), imgPath)
	} else {
		rec.ReservedBytes, err = m.cloneTree(ctx, s.Tree.FullPath(), fsPath)
	}
	if err != nil {
		return Snapshot{}, err
	}
	m.crashPoint("snapshot:data")
	if err := m.durable("snapshot:dir", s.Sync()); err != nil {
		return Snapshot{}, err
	}
	rec.State = snapshotReady
	// The reserve measured may exceed the estimate promised; the ledger
	// counts it before the next check.
	if err := m.underSpace(snapshotKey(s.ID()), func() error { return m.writeSnapshotRecord(s, rec) }); err != nil {
		return Snapshot{}, err
	}
	m.crashPoint("snapshot:done")
	return rec.snapshot(s.ID())
}

// startSnapshot makes the snapshot directory s with its record rec, which
// says "creating". The record is the promise of rec.ReservedBytes: once it
// is written, space() counts it, so the room check (under over-commit
// ratio r) and the record are made under spaceMu together.
func (m *Manager) startSnapshot(s localstorage.SnapshotDirectory, rec snapshotRecord, r Overcommit) error {
	release, err := m.promise(snapshotKey(s.ID()), rec.ReservedBytes, r)
	if err != nil {
		return err
	}
	defer release()
	if err := os.Mkdir(s.FullPath(), 0o700); err != nil {
		return classifySpace(fmt.Errorf("creating snapshot directory: %w", err))
	}
	m.crashPoint("snapshot:mkdir")
	return m.writeSnapshotRecord(s, rec)
}

// heldBytes is what volume vol holds on the data filesystem now: its
// quota's usage (0 where quotas are not enforced, or the volume lost its
// quota: nothing measurable; the copy then records what it measured), or
// its image's allocated blocks. A copy shares that much with it.
func (m *Manager) heldBytes(vol Info, fsPath, imgPath string) (int64, error) {
	if vol.Mode == Block {
		var st unix.Stat_t
		if err := unix.Stat(imgPath, &st); err != nil {
			return 0, fmt.Errorf("reading image file: %w", err)
		}
		return min(st.Blocks*512, st.Size), nil
	}
	if !m.CapacityEnforced() {
		return 0, nil
	}
	q, err := m.quotaOf(vol.ID, fsPath)
	if errors.Is(err, fsquota.ErrNoQuota) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the volume's usage: %w", err)
	}
	return int64(q.UsedBytes), nil
}

// cloneImage makes the new file dst a clone of the image src, durably,
// and returns the bytes it shares with src.
func (m *Manager) cloneImage(dst, src string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("opening image file: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, classifySpace(fmt.Errorf("creating image file: %w", err))
	}
	defer out.Close()
	if err := reflink.Clone(out, in); err != nil {
		return 0, classifySpace(err)
	}
	if err := m.durable("clone:image", out.Sync()); err != nil {
		return 0, fmt.Errorf("syncing image file: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(out.Fd()), &st); err != nil {
		return 0, fmt.Errorf("reading image file: %w", err)
	}
	return min(st.Blocks*512, st.Size), out.Close()
}

// cloneTree makes dst, which must not exist, a copy of the tree src,
// durably, and returns the bytes it shares with src.
func (m *Manager) cloneTree(ctx context.Context, dst, src string) (int64, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return 0, classifySpace(fmt.Errorf("creating snapshot tree: %w", err))
	}
	c, err := reflink.CopyTree(ctx, src, dst, reflink.TreeOptions{SkipXattr: isPlinthXattr})
	if err != nil {
		return 0, classifySpace(err)
	}
	// One syncfs instead of an fsync per file.
	if err := m.durable("clone:tree", fsquota.Sync(dst)); err != nil {
		return 0, err
	}
	return c.AllocatedBytes, nil
}

// DeleteSnapshot removes snapshot id. It is idempotent (a missing snapshot
// is deleted already) and resumable: the record says "deleting" before
// any data goes, so a crash halfway leaves no snapshot that looks whole.
// Volumes made from the snapshot keep their data: they share blocks with
// it, they do not depend on it.
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", id, err)
	}
	if err := ValidateSnapshotID(id); err != nil {
		return fmt.Errorf("deleting snapshot: %w", err)
	}
	defer m.changes.signal()
	unlock := m.locks.Lock(snapshotKey(id))
	defer unlock()
	s, err := m.settledSnapshotDir("deleting snapshot", id)
	if err != nil {
		return err
	}
	if err := m.removeSnapshot(s); err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", id, err)
	}
	m.releaseToShare()
	return nil
}

// GetSnapshot returns snapshot id, or ErrNotFound (also for one being made
// or deleted, or interrupted at it: that one is settled first).
func (m *Manager) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("reading snapshot %s: %w", id, err)
	}
	if err := ValidateSnapshotID(id); err != nil {
		return Snapshot{}, fmt.Errorf("reading snapshot: %w", err)
	}
	unlock := m.locks.Lock(snapshotKey(id))
	defer unlock()
	s, err := m.settledSnapshotDir("reading snapshot", id)
	if err != nil {
		return Snapshot{}, err
	}
	return m.currentSnapshot(s)
}

// ListSnapshots returns every complete snapshot, sorted by ID. Like List it
// takes no locks: a snapshot being made or deleted is left out, and one
// may change while the caller looks. Entries of snapshots/ that are no
// snapshot (a foreign file, an unreadable record) are left out too; Recover
// reports them.
func (m *Manager) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	recs, err := m.snapshotRecords()
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	var out []Snapshot
	for _, r := range recs {
		if r.rec.State != snapshotReady {
			continue
		}
		if snap, err := r.rec.snapshot(r.id); err == nil {
			out = append(out, snap)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// currentSnapshot returns the complete snapshot in s, after removing an
// incomplete one (ErrNotFound then). Callers hold its lock.
func (m *Manager) currentSnapshot(s localstorage.SnapshotDirectory) (Snapshot, error) {
	rec, err := m.readSnapshotRecord(s)
	if err != nil {
		return Snapshot{}, err
	}
	if rec != nil && rec.State == snapshotReady {
		return rec.snapshot(s.ID())
	}
	if exists(s.FullPath()) {
		if err := m.removeSnapshot(s); err != nil {
			return Snapshot{}, fmt.Errorf("removing the incomplete snapshot %s: %w", s.ID(), err)
		}
	}
	return Snapshot{}, fmt.Errorf("snapshot %s: %w", s.ID(), ErrNotFound)
}

// removeSnapshot deletes whatever exists of the snapshot in s: its record
// says "deleting" first (unless it is missing or says "creating", which no
// caller can mistake for a snapshot either), then the data goes, then the
// record, then the directory. Callers hold its lock.
func (m *Manager) removeSnapshot(s localstorage.SnapshotDirectory) error {
	defer m.recount(snapshotKey(s.ID()))
	if !exists(s.FullPath()) {
		return nil
	}
	rec, err := m.readSnapshotRecord(s)
	if err != nil {
		return err
	}
	if rec != nil && rec.State == snapshotReady {
		rec.State = snapshotDeleting
		if err := m.writeSnapshotRecord(s, *rec); err != nil {
			return err
		}
	}
	m.crashPoint("snapshot-delete:intent")
	if err := os.RemoveAll(s.Tree.FullPath()); err != nil {
		return fmt.Errorf("removing snapshot tree: %w", err)
	}
	if err := os.Remove(s.Image.FullPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing snapshot image: %w", err)
	}
	if err := m.durable("snapshot-delete:data", s.Sync()); err != nil {
		return err
	}
	m.crashPoint("snapshot-delete:data")
	if err := s.Record.Remove(); err != nil {
		return fmt.Errorf("removing snapshot record: %w", err)
	}
	if err := os.Remove(s.FullPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing snapshot directory: %w", err)
	}
	return m.durable("snapshot-delete:dir", m.Data.Snapshots.Sync())
}

// settledSnapshotDir makes earlier changes durable (settleDebt) and
// returns snapshot id's directory: how each call on one snapshot begins,
// under that snapshot's lock. op names the call in the errors it returns.
func (m *Manager) settledSnapshotDir(op, id string) (localstorage.SnapshotDirectory, error) {
	if err := m.settleDebt(); err != nil {
		return localstorage.SnapshotDirectory{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	s, err := m.snapshotDir(id)
	if err != nil {
		return s, fmt.Errorf("%s: %w", op, err)
	}
	return s, nil
}

func (m *Manager) snapshotDir(id string) (localstorage.SnapshotDirectory, error) {
	s, err := m.Data.Snapshots.Snapshot(id)
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return s, nil
}

// readSnapshotRecord returns the record in s, or nil if there is none. A
// damaged record is an error: nothing is removed on a guess.
func (m *Manager) readSnapshotRecord(s localstorage.SnapshotDirectory) (*snapshotRecord, error) {
	var rec snapshotRecord
	found, err := readStateFile(s.Record, &rec)
	if err != nil {
		return nil, fmt.Errorf("record of snapshot %s: %w", s.ID(), err)
	}
	if !found {
		return nil, nil
	}
	switch rec.State {
	case snapshotCreating, snapshotReady, snapshotDeleting:
	default:
		return nil, fmt.Errorf("record %s of snapshot %s has unknown state %q; inspect and remove it by hand", s.Record.FullPath(), s.ID(), rec.State)
	}
	return &rec, nil
}

func (m *Manager) writeSnapshotRecord(s localstorage.SnapshotDirectory, rec snapshotRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding record of snapshot %s: %w", s.ID(), err)
	}
	if err := m.durable("snapshot-record", s.Record.WriteAtomic(b, 0o600)); err != nil {
		return fmt.Errorf("recording snapshot %s as %s: %w", s.ID(), rec.State, err)
	}
	return nil
}

// recoverSnapshots removes every snapshot a crash left incomplete.
func (m *Manager) recoverSnapshots(ctx context.Context) ([]Recovery, error) {
	entries, err := m.Data.Snapshots.List()
	if err != nil {
		return nil, err
	}
	var done []Recovery
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		if e.ID == "" {
			continue
		}
		if r, ok := m.recoverSnapshot(e.ID); ok {
			done = append(done, r)
		}
	}
	return done, nil
}

func (m *Manager) recoverSnapshot(id string) (Recovery, bool) {
	unlock := m.locks.Lock(snapshotKey(id))
	defer unlock()
	s, err := m.snapshotDir(id)
	if err != nil {
		return Recovery{}, false
	}
	r := Recovery{ID: snapshotKey(id), Action: "removed an incomplete snapshot"}
	rec, err := m.readSnapshotRecord(s)
	switch {
	case err != nil:
		r.Action, r.Err = "reading snapshot record", err
		return r, true
	case rec != nil && rec.State == snapshotReady:
		return Recovery{}, false
	}
	if err := m.removeSnapshot(s); err != nil {
		r.Err = err
	}
	return r, true
}

// snapshotsReserved sums what snapshots reserve (see space.go): every
// snapshot with a record, also one being made (its estimate) or deleted.
func (m *Manager) snapshotsReserved() (int64, error) {
	recs, err := m.snapshotRecords()
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, r := range recs {
		sum += r.rec.ReservedBytes
	}
	return sum, nil
}

// idRecord is a snapshot's ID with its record.
type idRecord struct {
	id  string
	rec *snapshotRecord
}

// snapshotRecords returns, in the order of snapshots/, every snapshot that
// has a readable record, in whatever state (ready, being made or being
// deleted). Entries of snapshots/ with no valid snapshot name or no
// readable record are left out. It takes no locks.
func (m *Manager) snapshotRecords() ([]idRecord, error) {
	entries, err := m.Data.Snapshots.List()
	if err != nil {
		return nil, err
	}
	var out []idRecord
	for _, e := range entries {
		if e.ID == "" {
			continue
		}
		s, err := m.snapshotDir(e.ID)
		if err != nil {
			continue
		}
		if rec, err := m.readSnapshotRecord(s); err == nil && rec != nil {
			out = append(out, idRecord{e.ID, rec})
		}
	}
	return out, nil
}
