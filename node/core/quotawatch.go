package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fanotify"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// The quota watch: a process that may change the project ID of its files
// (FS_IOC_FSSETXATTR; Plinth's own runtime refuses it, other clusters'
// do not) can move a file of its volume into a neighbour's project and
// fill the neighbour's quota. The kernel raises no event for the move
// itself (fsquota's TestProjectIDChangeIsNotNotified), but it does for
// every write that follows, and the write is what takes the neighbour's
// room. So the watch follows every write, creation and rename on the data
// filesystem (pkg/fanotify), checks the project ID of each entry written
// in a filesystem volume (volume.Manager.ProjectOfDir, fsquota.RestoreAt),
// puts a stray back at once, and then walks its volume for the rest
// (volume.Manager.RestoreProjectIDs). An entry written outside every
// volume that carries a volume's project ID is taken out of it the same
// way (fsquota.ReleaseAt, releaseEntry): a process may move its
// emptyDir's files into a neighbour's project as well as its volume's.
// The quota audit's periodic walks stay: they also find what the watch
// cannot see (stores through a shared mapping, events lost to a queue
// overflow while no walk ran).
const (
	quotaWatchName = "quotawatch"
	// quotaWatchMask is what the watch follows: writes (Modify, and
	// CloseWrite for stores through a mapping, seen at close), new
	// entries (Create, MovedTo; OnDir for directories), which take an
	// inode of whichever project their directory gives them, and removed
	// ones (Delete), which give one back: the poller counts both, so
	// that a volume whose user creates and deletes files all along
	// cannot hide an inode moved into its project (quotaquiet.go).
	quotaWatchMask = fanotify.Modify | fanotify.CloseWrite | fanotify.Create | fanotify.MovedTo | fanotify.Delete | fanotify.OnDir
	// quotaWatchBatch is how long events gather in the kernel's queue
	// between two reads. The kernel merges the events of one entry while
	// they wait, so a writer's millions of writes to a file cost one
	// check per batch; it is also most of how late the watch is.
	quotaWatchBatch = 250 * time.Millisecond
	// quotaWalkGap is the least time between two of the watch's walks of
	// one volume: a stray found meanwhile is put back by its check
	// already, and the walk that follows the gap finds the rest.
	quotaWalkGap = 10 * time.Second
	// quotaWalkRate is the most entries a second the watch's walks
	// examine: ten times the audit's pace, since a walk here answers an
	// escape in progress, and bounded, since a pod can provoke walks.
	quotaWalkRate = 20000
)

// quotaWatchRunnable runs the quota watch over vols' filesystem volumes.
// Where the kernel or the data filesystem cannot watch by file handles,
// or the process may not, it says so once and ends: the audit's walks are
// then what puts strays back.
func quotaWatchRunnable(vols *volume.Manager) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		dir := vols.Data.Volumes.FullPath()
		w, err := fanotify.Open(dir, quotaWatchMask)
		if errors.Is(err, fanotify.ErrUnsupported) || errors.Is(err, unix.EPERM) {
			log.Warningf("quota watch: off (%v); files a process moves out of its volume's project quota are put back by the quota audit's periodic walks only", err)
			supervisor.Signal(ctx, supervisor.SignalDone)
			return nil
		}
		if err != nil {
			return err
		}
		defer w.Close()
		walks := &quotaWalks{vols: vols, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
		if err := supervisor.Run(ctx, "walks", walks.run); err != nil {
			return err
		}
		events := &quotaEvents{}
		if vols.CapacityEnforced() {
			poller := &quotaPoller{vols: vols, events: events, walks: walks}
			if err := supervisor.Run(ctx, "poll", poller.run); err != nil {
				return err
			}
		}
		log.Infof("quota watch: on, over the filesystem of %s", dir)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			batch, err := w.Read(ctx)
			if err != nil {
				return err
			}
			checkEntries(ctx, log, vols, w, batch, walks, events)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(quotaWatchBatch):
			}
		}
	}
}

// checkEntries checks the entries of one batch of events, and asks for a
// walk of each volume where a stray was found, or of every volume when
// events were lost. Each directory of the batch is opened and mapped to
// its volume once (a writer of many files in one directory costs one
// check per file, not one lookup of its volume each). The events in
// volumes are counted for the poller (quotaEvents), which tells a
// volume's own writes from a quiet move into its project.
func checkEntries(ctx context.Context, log logtree.LeveledLogger, vols *volume.Manager, w *fanotify.Watch, events []fanotify.Event, walks *quotaWalks, seen *quotaEvents) {
	dirs := map[string]*batchDir{}
	defer func() {
		for _, d := range dirs {
			if d.fd >= 0 {
				unix.Close(d.fd)
			}
		}
	}()
	for _, ev := range events {
		if ev.Overflow {
			log.Warning("quota watch: the event queue overflowed; walking every filesystem volume")
			walks.addAll()
			continue
		}
		if ev.Name == "" {
			continue
		}
		d := dirs[ev.Dir.Key()]
		if d == nil {
			d = openBatchDir(ctx, log, vols, w, ev.Dir)
			dirs[ev.Dir.Key()] = d
		}
		// An entry only removed has nothing left to check.
		removed := ev.Mask&^(fanotify.Delete|fanotify.OnDir) == 0
		switch {
		case d.Project != 0:
			seen.note(d.Project, ev.Mask)
			if !removed {
				checkVolumeEntry(ctx, log, vols, d, ev.Name, walks)
			}
		case d.Outside && !removed:
			releaseEntry(ctx, log, vols, d, ev.Name)
		}
	}
}

// checkVolumeEntry puts entry name of volume directory d back into its
// volume's project if it left it, notes the repair for the audit's
// reporter to tell the user (volume.Manager.NoteRepair), and asks for a
// walk of the volume.
func checkVolumeEntry(ctx context.Context, log logtree.LeveledLogger, vols *volume.Manager, d *batchDir, name string, walks *quotaWalks) {
	r, err := fsquota.RestoreAt(ctx, d.fd, name, d.Project)
	if errors.Is(err, unix.ENOENT) {
		return // removed since
	}
	if err != nil {
		log.Warningf("quota watch: volume %s: %v", d.Volume, err)
		return
	}
	if r.Strays > 0 {
		r.Rebase(d.InVolume)
		log.Warningf("quota watch: volume %s: put %q (%d bytes) back into the volume's project quota: a process had moved it out and was writing to it",
			d.Volume, r.FirstStray, r.StrayBytes)
		vols.NoteRepair(d.Volume, r)
		walks.add(d.Volume)
	}
}

// releaseEntry takes entry name of directory d, outside every volume, out
// of a volume's project if a process moved it into one: a pod that may
// change project IDs could otherwise fill a neighbour volume's quota from
// its emptyDir, its container's layer or its logs, which no volume's walk
// sees. It costs what checkVolumeEntry costs, one FS_IOC_FSGETXATTR; no
// walk follows, since no tree of the node is the volume's to walk (the
// node share's audit walks the share's). A release is noted for the
// operator's counters (volume.Manager.NoteRelease).
func releaseEntry(ctx context.Context, log logtree.LeveledLogger, vols *volume.Manager, d *batchDir, name string) {
	r, err := fsquota.ReleaseAt(ctx, d.fd, name, volume.FirstProjectID, volume.LastProjectID, d.Release)
	if errors.Is(err, unix.ENOENT) {
		return // removed since
	}
	if err != nil {
		log.Warningf("quota watch: %s: %v", d.Path, err)
		return
	}
	if r.Strays > 0 {
		log.Warningf("quota watch: %s: gave %q (%d bytes) project ID %d: it lies outside every volume, and a process had moved it into a volume's project quota and was writing to it",
			d.Path, name, r.StrayBytes, d.Release)
		r.Rebase(d.Path)
		vols.NoteRelease(r)
	}
}

// batchDir is a directory of a batch's events, open as fd (-1 if not),
// and what its entries should carry (nothing to check when neither
// Project nor Outside is set).
type batchDir struct {
	fd int
	volume.DirProject
}

// openBatchDir opens the directory of handle h and finds its volume. A
// directory outside every volume is released itself too (releaseEntry,
// once a batch): one a process moved into a volume's project with
// PROJINHERIT gives that ID to every entry made in it.
func openBatchDir(ctx context.Context, log logtree.LeveledLogger, vols *volume.Manager, w *fanotify.Watch, h fanotify.Handle) *batchDir {
	fd, err := w.OpenDir(h)
	if err != nil {
		return &batchDir{fd: -1} // removed since
	}
	dp, err := vols.ProjectOfDir(fd)
	if err != nil {
		log.Warningf("quota watch: %v", err)
	}
	d := &batchDir{fd: fd, DirProject: dp}
	if d.Outside {
		releaseEntry(ctx, log, vols, d, ".")
	}
	return d
}

// quotaWalks walks the volumes the watch asks for, one at a time, each at
// most once per quotaWalkGap.
type quotaWalks struct {
	vols *volume.Manager
	mu   sync.Mutex
	// pending are the volumes to walk; all asks for every one, and
	// outside for the search outside every volume (ReleaseOutside).
	pending map[string]bool
	all     bool
	wake    chan struct{}
}

// outsideWalk is the search outside every volume among the pending
// walks: not a volume ID (ValidateID refuses "/").
const outsideWalk = "/outside"

// addOutside asks for the search outside every volume.
func (q *quotaWalks) addOutside() { q.add(outsideWalk) }

func (q *quotaWalks) add(id string) {
	q.mu.Lock()
	q.pending[id] = true
	q.mu.Unlock()
	q.poke()
}

func (q *quotaWalks) addAll() {
	q.mu.Lock()
	q.all = true
	q.mu.Unlock()
	q.poke()
}

func (q *quotaWalks) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the volumes asked for and forgets them.
func (q *quotaWalks) take() (ids []string, all bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for id := range q.pending {
		ids = append(ids, id)
	}
	clear(q.pending)
	all, q.all = q.all, false
	return ids, all
}

// run walks what is asked for until ctx ends. A volume walked less than
// quotaWalkGap ago waits for the gap to pass.
func (q *quotaWalks) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	limiter := rate.NewLimiter(quotaWalkRate, quotaWalkRate/10)
	last := map[string]time.Time{}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.wake:
		}
		ids, all := q.take()
		if all {
			ids = append(ids, q.filesystemVolumes(ctx, log)...)
		}
		for _, id := range ids {
			if wait := quotaWalkGap - time.Since(last[id]); wait > 0 {
				q.mu.Lock()
				q.pending[id] = true
				q.mu.Unlock()
				time.AfterFunc(wait, q.poke)
				continue
			}
			last[id] = time.Now()
			if id == outsideWalk {
				if err := q.releaseOutside(ctx, log, limiter); err != nil {
					return err
				}
				continue
			}
			r, err := q.vols.RestoreProjectIDs(ctx, id, limiter.Wait)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				log.Warningf("quota watch: %v", err)
			}
			if r.Strays > 0 {
				log.Warningf("quota watch: volume %s: put %d entries holding %d bytes back into the volume's project quota (the first: %s)",
					id, r.Strays, r.StrayBytes, r.FirstStray)
				q.vols.NoteRepair(id, r)
			}
		}
	}
}

// releaseOutside searches the data filesystem outside every volume for
// entries carrying a volume's project ID and releases them, as
// releaseEntry releases one: the same report, in the watch's log and the
// noted releases. It returns only ctx's error.
func (q *quotaWalks) releaseOutside(ctx context.Context, log logtree.LeveledLogger, limiter *rate.Limiter) error {
	start := time.Now()
	r, err := q.vols.ReleaseOutside(ctx, limiter.Wait)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		log.Warningf("quota watch: %v", err)
	}
	if r.Strays > 0 {
		log.Warningf("quota watch: released %d entries holding %d bytes outside every volume from volumes' project quotas (the first: %s; %d entries examined in %s): a process had moved them in after writing them",
			r.Strays, r.StrayBytes, r.FirstStray, r.Checked, time.Since(start).Round(time.Millisecond))
		q.vols.NoteRelease(r)
	} else {
		log.Infof("quota watch: found nothing outside every volume in a volume's project quota (%d entries examined in %s)", r.Checked, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// filesystemVolumes lists the IDs of the filesystem volumes.
func (q *quotaWalks) filesystemVolumes(ctx context.Context, log logtree.LeveledLogger) []string {
	entries, err := q.vols.List(ctx)
	if err != nil {
		log.Warningf("quota watch: %v", err)
		return nil
	}
	var ids []string
	for _, e := range entries {
		if e.Mode == volume.Filesystem && e.Pending == "" && e.Problem == "" {
			ids = append(ids, e.ID)
		}
	}
	return ids
}
