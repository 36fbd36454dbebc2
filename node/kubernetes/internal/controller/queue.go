package controller

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// BackoffQueue is a work queue whose per-key retry backoff cannot be bypassed.
//
// client-go's rate-limited queue only delays the retry it schedules itself: an
// informer update arriving meanwhile calls Add and the key is processed at
// once, so a claim that fails on every attempt (a full disk, say) is retried
// at the rate its object is updated rather than with exponential backoff. Here
// every key that failed carries a "not before" deadline; a key handed out
// before its deadline (however it got into the queue) is put back with the
// remaining delay instead of being processed. The retry then reads the latest
// state from the informer, so deferring the update loses nothing.
type BackoffQueue struct {
	queue   workqueue.TypedDelayingInterface[string]
	limiter workqueue.TypedRateLimiter[string]
	clock   clock.Clock

	mu        sync.Mutex
	notBefore map[string]time.Time
}

// NewBackoffQueue builds a queue named name (used in metrics and logs) whose
// retries back off exponentially from base to max per key. mp receives
// the queue's metrics (nil: none; see metrics.Metrics.WorkqueueProvider).
func NewBackoffQueue(name string, clk clock.WithTicker, base, maxDelay time.Duration, mp workqueue.MetricsProvider) *BackoffQueue {
	return &BackoffQueue{
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Name:            name,
			Clock:           clk,
			MetricsProvider: mp,
		}),
		limiter:   workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, maxDelay),
		clock:     clk,
		notBefore: map[string]time.Time{},
	}
}

// Add enqueues key for processing as soon as its backoff (if any) allows.
func (q *BackoffQueue) Add(key string) { q.queue.Add(key) }

// Retry enqueues key for processing now, ending its backoff: for a change
// that removes the cause of the failures it backs off from (the object the
// key waited for was created), which an ordinary Add would leave waiting
// until the backoff ran out.
func (q *BackoffQueue) Retry(key string) {
	q.Forget(key)
	q.queue.Add(key)
}

// AddAfter enqueues key after d, still subject to its backoff.
func (q *BackoffQueue) AddAfter(key string, d time.Duration) { q.queue.AddAfter(key, d) }

// Get blocks until a key whose backoff has expired is available. It returns
// false once the queue is shut down.
func (q *BackoffQueue) Get() (string, bool) {
	for {
		key, shutdown := q.queue.Get()
		if shutdown {
			return "", false
		}
		q.mu.Lock()
		until, backingOff := q.notBefore[key]
		q.mu.Unlock()
		if wait := until.Sub(q.clock.Now()); backingOff && wait > 0 {
			q.queue.Done(key)
			q.queue.AddAfter(key, wait)
			continue
		}
		return key, true
	}
}

// Done finishes processing of key. A nil err clears its backoff; an error
// schedules a retry after the next, longer, backoff delay.
func (q *BackoffQueue) Done(key string, err error) {
	q.mu.Lock()
	if err == nil {
		q.limiter.Forget(key)
		delete(q.notBefore, key)
		q.mu.Unlock()
		q.queue.Done(key)
		return
	}
	delay := q.limiter.When(key)
	q.notBefore[key] = q.clock.Now().Add(delay)
	q.mu.Unlock()
	q.queue.Done(key)
	q.queue.AddAfter(key, delay)
}

// Forget drops key's backoff state without processing it, for keys whose
// object is gone.
func (q *BackoffQueue) Forget(key string) {
	q.mu.Lock()
	q.limiter.Forget(key)
	delete(q.notBefore, key)
	q.mu.Unlock()
}

// Failures reports how many consecutive failures key has had.
func (q *BackoffQueue) Failures(key string) int { return q.limiter.NumRequeues(key) }

// Len reports how many keys wait for processing now (not counting delayed ones).
func (q *BackoffQueue) Len() int { return q.queue.Len() }

// ShutDown makes Get return false once the queue is drained of in-flight work.
func (q *BackoffQueue) ShutDown() { q.queue.ShutDown() }
