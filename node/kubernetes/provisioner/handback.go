package provisioner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// fitsElsewhere reports whether err, from creating a claim's volume here,
// is this node's alone, so that another node may well hold the volume:
// the data filesystem has no room for it (the scheduler read capacity
// published before other claims took the room), or it is a filesystem
// volume and this node cannot enforce its size. Errors of the claim
// itself (an invalid size) would follow it anywhere and are not.
func fitsElsewhere(err error) bool {
	return errors.Is(err, volume.ErrNoSpace) || errors.Is(err, volume.ErrCapacityNotEnforced)
}

// handBack undoes the placement of a claim this node cannot provision
// (fitsElsewhere's cause), as external provisioners do for the scheduler:
// it removes the selected-node annotation, so that the scheduler chooses
// again for a WaitForFirstConsumer claim, now with the capacity this node
// publishes, and the admission server's placer (package placement)
// chooses again for an Immediate one, passing this node over for a
// while. Kept, the
// placement would hold the claim, and its pod, on this node until room is
// freed here, however much another node has. The patch is conditional on
// the version the attempt was made from: a claim bound or changed
// meanwhile is synced again instead. Where the cluster's admission policy
// predates hand-backs and refuses it, the claim waits here as it did
// before, retried with backoff. The log says why before the patch is
// sent: the Event is sent after it, asynchronously, and a process killed
// in between would otherwise leave a claim given up with no word why.
//
// A claim handed back because this node cannot enforce sizes may be
// placed here again, and again: the capacity this node publishes is per
// class, not per volume mode, so nothing tells the scheduler that its
// filesystem claims cannot be served here, and where no node enforces
// sizes it has nowhere else to go. Such a claim is held here for a while
// before it is handed back again (holds), so that this does not become a
// loop of writes at the scheduler's retry rate.
func (r *run) handBack(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, req *request, cause error) error {
	now := r.clock.Now()
	if errors.Is(cause, volume.ErrCapacityNotEnforced) {
		if hold, started := r.holds.hold(pvc.UID, now, r.RetryMax); hold > 0 {
			if started {
				r.failClaim(pvc, fmt.Sprintf("%s; the claim was placed on this node again: it stays here %s, then is handed back again.",
					r.cannotProvision(req, cause), hold.Round(time.Second)))
			}
			r.claimQ.AddAfter(key, hold)
			return nil
		}
	}
	next := "the scheduler chooses a node again"
	switch {
	case errors.Is(cause, errSourceElsewhere):
		next = "the placer puts it on its data source's node"
	case ownership.BindsImmediately(req.class):
		next = "another node with room may take it"
	}
	r.log.Infof("handing back claim %s: %v", ownership.DescribeClaim(pvc), cause)
	_, err := r.patchClaim(ctx, pvc, "", map[string]any{"metadata": map[string]any{
		"resourceVersion": pvc.ResourceVersion,
		"annotations":     map[string]any{ownership.AnnSelectedNode: nil},
	}})
	switch {
	case err == nil:
		if errors.Is(cause, volume.ErrCapacityNotEnforced) {
			r.holds.handedBack(pvc.UID, now, r.RetryMax)
		}
		r.failClaim(pvc, fmt.Sprintf("%s; the claim is no longer placed on this node, %s.", r.cannotProvision(req, cause), next))
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		if r.handBackRefused.CompareAndSwap(false, true) {
			r.log.Warningf("handing back claim %s refused (%v); claims this node cannot provision wait for room here", ownership.DescribeClaim(pvc), err)
		}
		r.failClaim(pvc, r.cannotProvision(req, cause)+" (will retry).")
		return cause
	}
	// A conflict too: the retry works from the claim as it is now.
	return fmt.Errorf("handing back claim %s after %w: %w", ownership.DescribeClaim(pvc), cause, err)
}

// holdBase is how long a claim handed back because this node cannot
// enforce its size is held here when it is placed here again the first
// time; each later return holds it twice as long, up to the controller's
// RetryMax (five minutes by default).
const holdBase = 10 * time.Second

// holds remembers the claims this node handed back because it cannot
// enforce their size, so that handBack holds one placed here again before
// handing it back again. It lives as long as the process: a restart, as
// after quotas were enabled, starts afresh.
type holds struct {
	mu     sync.Mutex
	claims map[types.UID]*handedBack
}

// handedBack is what holds knows of one claim.
type handedBack struct {
	times int       // hand-backs so far
	at    time.Time // the last one
	since time.Time // when the claim was seen placed here again after it; zero before
}

// holdFor is the hold after the given number of hand-backs: holdBase, then
// doubling, at most limit.
func holdFor(times int, limit time.Duration) time.Duration {
	d := holdBase << min(max(times-1, 0), 16)
	return min(d, limit)
}

// hold returns how much longer the claim with uid is held here at now
// (zero: hand it back), and whether this call began the hold, so that
// the caller says so once.
func (h *holds) hold(uid types.UID, now time.Time, limit time.Duration) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.claims[uid]
	if c == nil {
		return 0, false
	}
	started := c.since.IsZero()
	if started {
		c.since = now
	}
	return max(c.since.Add(holdFor(c.times, limit)).Sub(now), 0), started
}

// handedBack records a hand-back of the claim with uid at now, and forgets
// the claims not handed back for long (bound elsewhere, or deleted).
func (h *holds) handedBack(uid types.UID, now time.Time, limit time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.claims == nil {
		h.claims = map[types.UID]*handedBack{}
	}
	for u, c := range h.claims {
		if now.Sub(c.at) > 4*limit+time.Hour {
			delete(h.claims, u)
		}
	}
	c := h.claims[uid]
	if c == nil {
		c = &handedBack{}
		h.claims[uid] = c
	}
	c.times++
	c.at, c.since = now, time.Time{}
}
