package placement

import (
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// offer is one node's room for a claim of one class: what its
// CSIStorageCapacity object says, less what the placer put there since.
type offer struct {
	node string
	room int64
	// admitted is false when the class's allowedTopologies exclude the
	// node's labels.
	admitted bool
	// heldUntil is when the node may be tried again for this claim after
	// it handed the claim back; zero when it did not.
	heldUntil time.Time
}

// verdict is what pick decided: a node, or why none.
type verdict struct {
	node string
	// why says, when node is empty, why no node was chosen; kind names
	// the reason in a word, so that it is told once, not at each change
	// of the figures in why.
	why, kind string
	// retry is, when node is empty, when a held node may be tried
	// again; zero when waiting for new capacity is all there is to do.
	retry time.Time
}

// pick chooses the node for a claim of bytes with uid among offers: an
// admitted, unheld node with room enough, the one with the most room, so
// that claims spread over the nodes and the next claim is least likely to
// land where the figures are stale. Ties go by a hash of the claim and the
// node, so that equal nodes share claims rather than one taking them all.
func pick(uid types.UID, bytes int64, offers []offer, now time.Time) verdict {
	var best *offer
	var admitted, free int
	var largest int64
	var retry time.Time
	for i := range offers {
		o := &offers[i]
		if !o.admitted {
			continue
		}
		admitted++
		if now.Before(o.heldUntil) {
			if o.room >= bytes && (retry.IsZero() || o.heldUntil.Before(retry)) {
				retry = o.heldUntil
			}
			continue
		}
		free++
		largest = max(largest, o.room)
		if o.room < bytes {
			continue
		}
		if best == nil || o.room > best.room || o.room == best.room && tieBreak(uid, o.node) < tieBreak(uid, best.node) {
			best = o
		}
	}
	if best != nil {
		return verdict{node: best.node}
	}
	switch {
	case len(offers) == 0:
		return verdict{kind: "unpublished", why: "no node publishes capacity for its StorageClass"}
	case admitted == 0:
		return verdict{kind: "topology", why: fmt.Sprintf("the StorageClass's allowedTopologies admit none of the %d nodes that publish capacity for it", len(offers))}
	case free == 0:
		return verdict{kind: "handed back", why: fmt.Sprintf("each of the %d nodes its StorageClass admits handed it back", admitted), retry: retry}
	}
	return verdict{kind: "room", why: fmt.Sprintf("no node has room for %d bytes: the most any of the %d nodes its StorageClass admits has is %d", bytes, free, largest), retry: retry}
}

// tieBreak orders nodes of equal room differently for each claim.
func tieBreak(uid types.UID, node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	return h.Sum64()
}

// Timings of the ledger and of the holds.
const (
	// settle is how long after a placement the node's published figures
	// are taken to show the claim: the node provisions within a fraction
	// of a second and publishes at most once a second after a change.
	settle = 3 * time.Second
	// promiseMax is how long a placement counts against a node whose
	// figures do not change at all (a node that is down).
	promiseMax = time.Minute
	// holdBase is how long a node that handed a claim back is passed
	// over for it the first time; each later hand-back doubles it, up to
	// holdMax.
	holdBase = 10 * time.Second
	holdMax  = 5 * time.Minute
	// forgetAfter is how long the placer remembers where it placed a
	// claim it has not seen since.
	forgetAfter = time.Hour
)

// ledger holds what the placer put on each node that the node's
// published capacity may not show yet, so that a burst of claims is not
// all placed on the one node whose figures were largest. It is a guess
// that only errs on the safe side for a while: a node's exact check and
// its hand-back stay the rule.
type ledger struct {
	mu       sync.Mutex
	promised map[string][]promise
}

// promise is one placement not yet in a node's figures.
type promise struct {
	bytes int64
	at    time.Time
}

// promise records bytes placed on node at now.
func (l *ledger) promise(node string, bytes int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.promised == nil {
		l.promised = map[string][]promise{}
	}
	l.promised[node] = append(l.promised[node], promise{bytes: bytes, at: now})
}

// published takes note that node published new figures at now: they show
// the placements made settle before it.
func (l *ledger) published(node string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep(node, func(p promise) bool { return now.Sub(p.at) < settle })
}

// owed sums what was placed on node that its figures may not show yet.
func (l *ledger) owed(node string, now time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep(node, func(p promise) bool { return now.Sub(p.at) < promiseMax })
	var sum int64
	for _, p := range l.promised[node] {
		sum += p.bytes
	}
	return sum
}

// keep drops node's promises that want rejects. The caller holds mu.
func (l *ledger) keep(node string, want func(promise) bool) {
	ps := l.promised[node][:0]
	for _, p := range l.promised[node] {
		if want(p) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		delete(l.promised, node)
		return
	}
	l.promised[node] = ps
}

// attempts remembers where the placer put each claim. A claim seen
// unplaced again was handed back by the node it was put on (which could
// not hold it: no room after all, or sizes it cannot enforce), and that
// node is passed over for it for a while, longer each time. The memory
// is the leader's alone: a new leader may put a claim once more on a
// node that handed it back, which hands it back again.
type attempts struct {
	mu     sync.Mutex
	claims map[types.UID]*claimAttempts
}

// claimAttempts is what attempts knows of one claim.
type claimAttempts struct {
	// from is the resourceVersion of the claim the last placement was
	// made from: a cached claim still at that version is stale, the
	// watch has not yet brought the placement.
	from  string
	last  time.Time
	nodes map[string]*nodeAttempts
}

type nodeAttempts struct {
	times int
	last  time.Time
}

// placed records that the claim uid, at resourceVersion from, was put on
// node at now, and forgets claims not placed for forgetAfter.
func (a *attempts) placed(uid types.UID, from, node string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.claims == nil {
		a.claims = map[types.UID]*claimAttempts{}
	}
	for u, c := range a.claims {
		if now.Sub(c.last) > forgetAfter {
			delete(a.claims, u)
		}
	}
	c := a.claims[uid]
	if c == nil {
		c = &claimAttempts{nodes: map[string]*nodeAttempts{}}
		a.claims[uid] = c
	}
	n := c.nodes[node]
	if n == nil {
		n = &nodeAttempts{}
		c.nodes[node] = n
	}
	n.times++
	n.last, c.last, c.from = now, now, from
}

// stale reports whether a cached claim at resourceVersion rv is the very
// version a placement was made from.
func (a *attempts) stale(uid types.UID, rv string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.claims[uid]
	return c != nil && c.from == rv
}

// heldUntil is when node may be tried again for the claim uid: zero when
// it was never tried.
func (a *attempts) heldUntil(uid types.UID, node string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.claims[uid]
	if c == nil || c.nodes[node] == nil {
		return time.Time{}
	}
	n := c.nodes[node]
	return n.last.Add(min(holdBase<<min(n.times-1, 16), holdMax))
}
