package controller

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// OwnWrites is a controller's view of one kind of object: an informer's
// store, overlaid with the objects this controller wrote (or read live)
// that the watch has not delivered yet. Without the overlay, a key
// re-queued right after a write acts on the older cached copy: the
// provisioner would find no PV for a claim it has just provisioned and
// provision again (harmless thanks to idempotency, but a wasted volume
// operation and API round trip), and the resizer would patch a claim's
// status from a stale resourceVersion and fail with a conflict.
//
// An overlaid object is returned until the store holds the same or a newer
// resourceVersion, or until its TTL passes (a write the watch never
// confirms, because the object was deleted at once, is forgotten).
//
// client-go's MutationCache does not do this job: for an object that its
// backing store lacks, it compares the remembered object with itself,
// finds it "not newer" and forgets it, so an added object is returned
// exactly once.
type OwnWrites[T metav1.Object] struct {
	store cache.Store
	clock clock.Clock
	ttl   time.Duration

	mu     sync.Mutex
	recent map[string]recent[T]
}

type recent[T any] struct {
	obj   T
	until time.Time
}

// NewOwnWrites overlays store with writes remembered for ttl.
func NewOwnWrites[T metav1.Object](store cache.Store, clk clock.Clock, ttl time.Duration) *OwnWrites[T] {
	return &OwnWrites[T]{store: store, clock: clk, ttl: ttl, recent: map[string]recent[T]{}}
}

// Remember records obj, which this controller just wrote or read from the
// API server, under its store key.
func (w *OwnWrites[T]) Remember(obj T) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.recent[key]; ok && newer(r.obj, obj) {
		return
	}
	w.recent[key] = recent[T]{obj: obj, until: w.clock.Now().Add(w.ttl)}
}

// Get returns the object with key: the store's copy once it is at least
// as new as the last one remembered, else the remembered one.
func (w *OwnWrites[T]) Get(key string) (T, bool) {
	var zero T
	obj, exists, err := w.store.GetByKey(key)
	stored, typed := obj.(T)
	w.mu.Lock()
	defer w.mu.Unlock()
	r, remembered := w.recent[key]
	if remembered && w.clock.Now().After(r.until) {
		delete(w.recent, key)
		remembered = false
	}
	switch {
	case err == nil && exists && typed && (!remembered || !newer(r.obj, stored)):
		delete(w.recent, key)
		return stored, true
	case remembered:
		return r.obj, true
	case err == nil && exists && typed:
		return stored, true
	}
	return zero, false
}

// newer reports whether a has a higher resourceVersion than b. The API
// server documents resourceVersions as opaque, but for one object they are
// etcd revisions that only grow; anything unparsable counts as not newer,
// so the informer's copy wins.
func newer(a, b metav1.Object) bool {
	ra, erra := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
	rb, errb := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
	return erra == nil && errb == nil && ra > rb
}
