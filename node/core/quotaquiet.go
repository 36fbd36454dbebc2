package core

import (
	"context"
	"sync"
	"time"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fanotify"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Quiet moves: a process that may change project IDs can write a file
// first and move it into a neighbour volume's project afterwards, writing
// nothing after the move. The move raises no event on the kernels the
// node runs on (not even FAN_ATTRIB with the watch's filesystem mark:
// fsquota's TestProjectIDChangeIsNotNotified), so the watch's checks of
// written entries never see the file, and outside every volume no walk
// would either. What the move does change is the neighbour's usage, which
// the kernel keeps per project: one quotactl a project (fsquota.Projects)
// reads them all. So the watch reads every volume's usage each
// quotaPollInterval and compares it with the events it saw in the
// volume's tree meanwhile:
//
//   - usage (bytes or inodes) that grew with no event in the volume's
//     tree, or inodes that grew by more than the entries created there
//     less those removed, came from elsewhere: a quiet move;
//   - then the watch searches the data filesystem outside the engine's
//     trees for entries carrying a volume's ID and releases them
//     (volume.Manager.ReleaseOutside), and walks each volume whose usage
//     fell, or whose inodes grew by less than the entries created in it
//     less those removed, in the same interval: the volume the file was moved out of
//     (volume.Manager.RestoreProjectIDs, reported to its claim like any
//     of the watch's repairs).
//
// Both searches are the watch's walks (quotaWalks): one at a time, at
// most once per quotaWalkGap each, at quotaWalkRate entries a second.
// Usage that grows quietly for a harmless reason (stores through a shared
// mapping, O_TMPFILE, a volume cloned by the engine) costs a search that
// finds nothing.
const (
	// quotaPollInterval is the time between two reads of the volumes'
	// usage. A move is decided on one interval after the one it
	// happened in (decide says why), so it is found within about
	// two intervals and the time its search takes.
	quotaPollInterval = time.Second
)

// quotaEvents counts the events the watch saw in each volume's tree (by
// the volume's project ID) since the poller last took them.
type quotaEvents struct {
	mu     sync.Mutex
	counts map[uint32]eventCount
}

// eventCount is what a volume's tree saw: entries written, created or
// removed (any), and of those, entries created (a new inode each) and
// entries removed (an inode freed, unless another link or an open file
// holds it: then the count errs towards a search that finds nothing).
type eventCount struct{ any, created, removed int64 }

// net is how many inodes the events account for: created less removed.
func (c eventCount) net() int64 { return c.created - c.removed }

// note counts one event, of mask, in the tree of the volume with project
// ID pid.
func (q *quotaEvents) note(pid uint32, mask uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.counts == nil {
		q.counts = map[uint32]eventCount{}
	}
	c := q.counts[pid]
	c.any++
	if mask&fanotify.Create != 0 {
		c.created++
	}
	// The kernel merges one entry's events while they wait: an entry
	// created and removed in one batch counts as both.
	if mask&fanotify.Delete != 0 {
		c.removed++
	}
	q.counts[pid] = c
}

// take returns the counts since the last take and starts anew.
func (q *quotaEvents) take() map[uint32]eventCount {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.counts
	q.counts = nil
	return c
}

// quotaPoller reads the volumes' usage every quotaPollInterval and asks
// for the searches of a quiet move.
type quotaPoller struct {
	vols   *volume.Manager
	events *quotaEvents
	walks  *quotaWalks
	// last is the usage read last, and grew what changed between the
	// two reads before it, with the events seen then (undecided).
	last    map[uint32]fsquota.Quota
	changed map[uint32]usageChange
	seen    map[uint32]eventCount
}

// usageChange is how a project's usage changed between two reads; fresh:
// the project had no inode at the first (a volume made meanwhile: its
// limits are set first, then its directory, created in volumes/ and so
// outside its tree, is given its ID).
type usageChange struct {
	bytes, inodes int64
	fresh         bool
}

// run polls until ctx ends.
func (p *quotaPoller) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	t := time.NewTicker(quotaPollInterval)
	defer t.Stop()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		p.poll(log)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// poll reads the usage once, decides on the changes of the interval
// before, and keeps this interval's for the next poll.
func (p *quotaPoller) poll(log logtree.LeveledLogger) {
	now, err := fsquota.Projects(p.vols.Data.Volumes.FullPath())
	if err != nil {
		log.Warningf("quota watch: reading the volumes' usage: %v", err)
		return
	}
	events := p.events.take()
	if p.last != nil {
		p.decide(log, events)
	}
	changed := map[uint32]usageChange{}
	for pid := range unionKeys(now, p.last) {
		if pid < volume.FirstProjectID || pid > volume.LastProjectID {
			continue
		}
		c := usageChange{int64(now[pid].UsedBytes) - int64(p.last[pid].UsedBytes), int64(now[pid].UsedInodes) - int64(p.last[pid].UsedInodes), p.last[pid].UsedInodes == 0}
		if c.bytes != 0 || c.inodes != 0 {
			changed[pid] = c
		}
	}
	if p.last == nil {
		changed = nil // the first read: nothing to compare with
	}
	p.last, p.changed, p.seen = now, changed, events
}

// decide looks at the changes of the interval before the last read, with
// the events seen in it and since (events): the kernel charges a write
// before it queues its event, so the event of a write read just before
// that poll comes only after it.
func (p *quotaPoller) decide(log logtree.LeveledLogger, events map[uint32]eventCount) {
	quiet, fell := judge(p.changed, p.seen, events)
	if len(quiet) == 0 {
		return
	}
	for _, pid := range quiet {
		c, ev := p.changed[pid], p.seen[pid].plus(events[pid])
		log.Warningf("quota watch: project %d grew by %d bytes and %d inodes with %d entries written and %d created in its volume: looking for files moved into it",
			pid, c.bytes, c.inodes, ev.any, ev.created)
	}
	p.walks.addOutside()
	for _, pid := range fell {
		owner, held, err := p.vols.ProjectIDs.Owner(pid)
		if err != nil {
			log.Warningf("quota watch: %v", err)
			continue
		}
		if held && volume.ValidateID(owner) == nil {
			p.walks.add(owner)
		}
	}
}

// judge sorts the projects whose usage changed in an interval (changed)
// by the events seen in their volumes' trees then and in the interval
// after (seen, events): quiet, those that grew with no event, or by more
// inodes than entries were created less those removed (a move into the
// project); fell, those that shrank with no event, or grew by fewer
// inodes than that (a move out of the project). A volume whose user
// deletes what it wrote is neither, and costs no walk.
func judge(changed map[uint32]usageChange, seen, events map[uint32]eventCount) (quiet, fell []uint32) {
	for pid, c := range changed {
		ev := seen[pid].plus(events[pid])
		if c.fresh {
			// The volume's directory: created, and no event in
			// the tree it heads.
			ev.any++
			ev.created++
		}
		switch {
		case (c.bytes > 0 || c.inodes > 0) && ev.any == 0, c.inodes > ev.net():
			quiet = append(quiet, pid)
		case c.inodes < ev.net(), c.bytes < 0 && ev.any == 0:
			fell = append(fell, pid)
		}
	}
	return quiet, fell
}

func (c eventCount) plus(d eventCount) eventCount {
	return eventCount{c.any + d.any, c.created + d.created, c.removed + d.removed}
}

// unionKeys returns the keys of a and b.
func unionKeys(a, b map[uint32]fsquota.Quota) map[uint32]bool {
	keys := make(map[uint32]bool, len(a))
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}
