package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
)

// The node share: the directories of the data filesystem that the node's
// other writers use (on a booted node the kubelet's root with the pods'
// emptyDirs, containerd's root with images and the containers' writable
// layers, and the pods' logs). Without a limit those writers can fill the
// free space that filesystem volumes were promised (Space.Promised: a
// promise the filesystem knows nothing of), and the volumes' writes then
// fail within their size; so can they fill the holes discarded block
// images rely on (Space.Unallocated).
//
// So the share is one more project quota: every file below its
// directories carries ShareProjectID (PROJINHERIT on the directories,
// existing trees relabelled when the share is set up), and the project's
// hard limit is what no volume was promised,
//
//	limit = used + Free - Promised - Unallocated - StateReserve
//
// but never less than the reserve (NodeShare.Reserve): room the share
// always keeps, which volumes are never promised. Its unused part is
// counted like a thick volume's (Space.ShareReserve), so Available and
// Create's check leave it out.
//
// The limit follows every change of the promise. Create and Expand lower
// it by the room they are about to promise before they check for room,
// under spaceMu, so that the share cannot write into that room between
// the check and the volume's quota (or allocation); after they return, as
// after Delete, the limit is fitted to the new promise, and RefitShare
// fits it to what else changed (Plinth's own records, holes punched in
// block images, volumes filling).
//
// Over-commit lends the room promised to volumes to other volumes, never
// to the share: the share's limit counts every promise in full. When
// over-committed volumes have been promised more than is free, the share
// is held at its reserve (at its usage, if that is larger: its writes then
// fail), which is why a node that over-commits needs a reserve that holds
// its images, logs and emptyDirs.

// ShareProjectID is the project of the node share: just below the
// volumes' range (FirstProjectID), so it is neither an ID an operator
// configures by hand nor one the volumes' allocator hands out.
const ShareProjectID = FirstProjectID - 1

// DefaultShareReserve is the reserve of the node share unless configured:
// room for the node's images, logs and emptyDirs however much volumes are
// promised. One GiB holds the images of a small node; a node with larger
// images or emptyDirs needs more (plinth-node --node-share-reserve).
const DefaultShareReserve = 1 << 30

// NodeShare is the node share's configuration (Config.Share).
type NodeShare struct {
	// Dirs are the directories on the data filesystem the node's other
	// writers use: absolute, neither inside the data tree's volumes or
	// state directories nor containing them. Missing ones are made
	// (0700). Empty: no share.
	Dirs []string
	// Reserve is the room the share always keeps (0: none; plinth-node's
	// default is DefaultShareReserve).
	Reserve int64
}

// nodeShare is a Manager's set-up share.
type nodeShare struct {
	dirs    []string
	reserve int64
}

// shareState is a Manager's share: its configuration, and the share once
// set up (nil before, and where it is not active). It is read without
// spaceMu by Space.
type shareState struct {
	cfg NodeShare
	set atomic.Pointer[nodeShare]
}

// ShareSetup is what SetUpShare did.
type ShareSetup struct {
	// Active: the share has its quota. False when no directory was
	// configured, none is on the data filesystem, or quotas are not
	// enforced (Reason says which).
	Active bool
	Reason error
	// Dirs are the share's directories, resolved; Elsewhere those of
	// the configured ones that are not on the data filesystem, which
	// the share leaves out.
	Dirs, Elsewhere []string
	// Reserve and Limit are the share's reserve and its limit now.
	Reserve, Limit int64
	// Restored is what relabelling the directories found.
	Restored fsquota.Restored
}

// SetUpShare makes the node share's directories, gives everything below
// them ShareProjectID (fsquota.RestoreTree, without entering mounts) and
// fits the share's limit. Call it once, after Recover and before the
// share's writers start. Where quotas are not enforced, or no directory
// was configured, it does nothing and says so.
func (m *Manager) SetUpShare(ctx context.Context) (ShareSetup, error) {
	cfg := m.share.cfg
	if len(cfg.Dirs) == 0 {
		return ShareSetup{Reason: errors.New("no directories configured for it")}, nil
	}
	if !m.CapacityEnforced() {
		return ShareSetup{Reason: m.QuotaError}, nil
	}
	reserve := cfg.Reserve
	dirs, elsewhere, err := m.shareDirs(cfg.Dirs)
	if err != nil {
		return ShareSetup{}, fmt.Errorf("setting up the node share: %w", err)
	}
	if len(dirs) == 0 {
		return ShareSetup{Elsewhere: elsewhere, Reason: errors.New("none of its directories is on the data filesystem")}, nil
	}
	setup := ShareSetup{Active: true, Dirs: dirs, Elsewhere: elsewhere, Reserve: reserve}
	for _, d := range dirs {
		r, err := fsquota.RestoreTree(ctx, d, ShareProjectID, nil)
		if err != nil {
			return setup, fmt.Errorf("setting up the node share: %w", err)
		}
		setup.Restored.Add(r)
	}
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	m.share.set.Store(&nodeShare{dirs: dirs, reserve: reserve})
	if setup.Limit, err = m.fitShare(0); err != nil {
		return setup, fmt.Errorf("setting up the node share: %w", err)
	}
	return setup, nil
}

// shareDirs checks and makes the share's directories and returns them
// resolved, and those left out because they are not on the data
// filesystem: they take nothing from it, and a node configured so (a
// kubelet root moved off the data partition) still runs.
func (m *Manager) shareDirs(dirs []string) (on, off []string, err error) {
	var st unix.Stat_t
	if err := unix.Stat(m.Data.Volumes.FullPath(), &st); err != nil {
		return nil, nil, &os.PathError{Op: "stat", Path: m.Data.Volumes.FullPath(), Err: err}
	}
	dataDev := st.Dev
	own := []string{m.Data.Volumes.FullPath(), m.Data.State.FullPath()}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, nil, fmt.Errorf("%w: directory %q is not absolute", ErrInvalid, d)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, err
		}
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range own {
			if localstorage.Within(real, o) || localstorage.Within(o, real) {
				return nil, nil, fmt.Errorf("%w: directory %s overlaps Plinth's own %s", ErrInvalid, real, o)
			}
		}
		if err := unix.Stat(real, &st); err != nil {
			return nil, nil, &os.PathError{Op: "stat", Path: real, Err: err}
		}
		if st.Dev != dataDev {
			off = append(off, real)
			continue
		}
		on = append(on, real)
	}
	return on, off, nil
}

// RefitShare fits the node share's limit to what volumes are promised now
// and returns it (0 and no error without an active share). The node calls
// it periodically: Create, Expand and Delete fit the limit themselves,
// but what else changes the free space (Plinth's own records, pods
// discarding parts of block volumes, volumes filling) does not.
func (m *Manager) RefitShare(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("fitting the node share: %w", err)
	}
	if !m.ShareActive() {
		return 0, nil
	}
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	return m.fitShare(0)
}

// RestoreShare gives every file and directory below the node share's
// directories ShareProjectID again (fsquota.RestoreTree, paced by pace),
// and reports those that had another. A pod in the host's user namespace
// can move files of its emptyDir out of the share's project (chattr -p)
// and write past the share's limit, into room volumes were promised;
// after this walk those files count again. Without an active share it
// does nothing. The walk takes no lock.
func (m *Manager) RestoreShare(ctx context.Context, pace func(context.Context) error) (fsquota.Restored, error) {
	var sum fsquota.Restored
	sh := m.share.set.Load()
	if sh == nil {
		return sum, nil
	}
	for _, d := range sh.dirs {
		r, err := fsquota.RestoreTree(ctx, d, ShareProjectID, pace)
		sum.Add(r)
		if err != nil {
			return sum, fmt.Errorf("restoring the node share's project IDs: %w", err)
		}
	}
	return sum, nil
}

// ShareActive reports whether the node share has its quota (SetUpShare).
func (m *Manager) ShareActive() bool { return m.share.set.Load() != nil }

// shareUsed is what the share's files hold now (0 without a share).
func (m *Manager) shareUsed() (used, reserve int64, err error) {
	sh := m.share.set.Load()
	if sh == nil {
		return 0, 0, nil
	}
	q, err := fsquota.ProjectQuota(m.Data.Volumes.FullPath(), ShareProjectID)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the node share's usage: %w", err)
	}
	return int64(q.UsedBytes), sh.reserve, nil
}

// fitShare sets the share's limit to what volumes are not promised, less
// promising: room a caller is about to promise. Callers hold spaceMu and
// have an active share. The share's usage is read before the free space,
// so that a write between the two makes the limit smaller, never larger.
func (m *Manager) fitShare(promising int64) (int64, error) {
	s, err := m.space()
	if err != nil {
		return 0, fmt.Errorf("fitting the node share: %w", err)
	}
	limit := s.ShareUsed + s.Free - s.Promised - s.Unallocated - StateReserve - promising
	// Never 0, which the kernel reads as no limit at all.
	limit = max(limit, m.share.set.Load().reserve, Alignment)
	if err := fsquota.SetLimits(m.Data.Volumes.FullPath(), ShareProjectID, fsquota.Limits{Bytes: uint64(limit)}); err != nil {
		return 0, fmt.Errorf("fitting the node share: %w", err)
	}
	return limit, nil
}

// promise takes spaceMu for a caller about to promise size more bytes
// under over-commit ratio r to key (a volume's ID or a snapshotKey): it
// lowers the share's limit by them, checks that they fit (checkSpace), and
// returns the function that reads key's promise back into the ledger
// (promiseLedger), fits the share to the new promise and releases spaceMu,
// to be called once the room is promised (or the attempt given up).
func (m *Manager) promise(key string, size int64, r Overcommit) (release func(), err error) {
	m.spaceMu.Lock()
	active := m.ShareActive()
	release = func() {
		m.recountLocked(key)
		if active {
			// A failure leaves the limit low until the next fit:
			// the share's writers get less, never the volumes.
			_, _ = m.fitShare(0)
		}
		m.spaceMu.Unlock()
	}
	if active {
		if _, err := m.fitShare(size); err != nil {
			release()
			return nil, err
		}
	}
	if err := m.checkSpace(size, r); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// releaseToShare fits the share's limit after room stopped being
// promised (a volume deleted). A failure leaves the limit low until the
// next fit (RefitShare): the share gets less for a while, no volume does.
func (m *Manager) releaseToShare() {
	if !m.ShareActive() {
		return
	}
	m.spaceMu.Lock()
	defer m.spaceMu.Unlock()
	_, _ = m.fitShare(0)
}
