package provisioner

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ownWrites is the controller's view of this node's PVs: the PV informer's
// store, plus the PVs this incarnation created that the watch has not
// delivered yet. Without the second part, a claim re-queued right after
// its provisioning (the PV controller updates it at once) would find no PV
// and provision again: harmless thanks to idempotency, but a wasted volume
// operation and API round trip per claim.
//
// client-go's MutationCache does not do this job: for an object that its
// backing store lacks, it compares the remembered object with itself,
// finds it "not newer" and forgets it, so an added object is returned
// exactly once.
type ownWrites struct {
	store cache.Store
	clock clock.Clock
	ttl   time.Duration

	mu     sync.Mutex
	recent map[string]recentPV
}

type recentPV struct {
	pv    *corev1.PersistentVolume
	until time.Time
}

func newOwnWrites(store cache.Store, clk clock.Clock, ttl time.Duration) *ownWrites {
	return &ownWrites{store: store, clock: clk, ttl: ttl, recent: map[string]recentPV{}}
}

// created records a PV this controller just created.
func (w *ownWrites) created(pv *corev1.PersistentVolume) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recent[pv.Name] = recentPV{pv: pv, until: w.clock.Now().Add(w.ttl)}
}

// get returns the PV called name: the informer's copy once it has one,
// else our own recent write. A write the watch never confirms (the PV was
// deleted at once) is forgotten after the TTL.
func (w *ownWrites) get(name string) (*corev1.PersistentVolume, bool) {
	obj, exists, err := w.store.GetByKey(name)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && exists {
		delete(w.recent, name)
		pv, ok := obj.(*corev1.PersistentVolume)
		return pv, ok
	}
	r, ok := w.recent[name]
	if !ok {
		return nil, false
	}
	if w.clock.Now().After(r.until) {
		delete(w.recent, name)
		return nil, false
	}
	return r.pv, true
}
