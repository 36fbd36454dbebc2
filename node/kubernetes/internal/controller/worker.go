// Package controller is the machinery the node's Kubernetes controllers
// (the provisioner, the resizer, the capacity publisher, node removal and
// volume health) are built from: their common configuration (Base), a work
// queue whose backoff informer updates cannot bypass, an informer view that
// includes the controller's own writes, the worker loop and the end of
// every Run (Loops), Event recording, the schedule of the periodic
// controllers (Every), and the claim and PV informers one process shares
// (Shared). Each controller builds its queue and handlers inside its Run,
// so a controller restarted by the supervisor never inherits a stale
// queue; the shared informers outlive it and stay current through their
// watches.
package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Loops is the end of every controller's Run, the part that follows the
// sync of its caches: the controller counts as healthy, its workers and
// tasks run until ctx ends, then its queues shut down and Run returns once
// every goroutine has. A Run reads as its own steps (build the run's
// state, add its handlers, sync, say it started) and then this one, the
// same for all, as in client-go's sample-controller. Everything Loops
// starts ends with the run, so that a controller the supervisor restarts
// finds no goroutine of its last incarnation still at work.
type Loops struct {
	// Workers process the controller's queues.
	Workers []Workers
	// Tasks are the controller's other goroutines, each run until ctx
	// ends: periodic looks (Every), and followers of signals that no
	// informer brings (the volume manager's Changed).
	Tasks []func(context.Context)
}

// Workers is Count goroutines working Queue with Sync (see Work).
type Workers struct {
	Queue *BackoffQueue
	Sync  func(context.Context, string) error
	Count int
}

// Run signals the supervisor that the controller is healthy, runs the
// workers and tasks until ctx ends, shuts the queues down, waits for every
// goroutine, and returns ctx's error. ctx must come from the supervisor.
func (l Loops) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	var wg sync.WaitGroup
	for _, w := range l.Workers {
		for range w.Count {
			wg.Go(func() { Work(ctx, log, w.Queue, w.Sync) })
		}
	}
	for _, task := range l.Tasks {
		wg.Go(func() { task(ctx) })
	}
	<-ctx.Done()
	for _, w := range l.Workers {
		w.Queue.ShutDown()
	}
	wg.Wait()
	return ctx.Err()
}

// Work processes keys from q with sync until the queue shuts down. A panic
// in sync (a bug, or an object shaped in a way nobody foresaw) becomes an
// error for that key, retried with backoff, so one bad object cannot take
// the controller down.
func Work(ctx context.Context, log logtree.LeveledLogger, q *BackoffQueue, sync func(context.Context, string) error) {
	for {
		key, ok := q.Get()
		if !ok {
			return
		}
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic while processing %s: %v", key, p)
					log.Errorf("%v", err)
				}
			}()
			return sync(ctx, key)
		}()
		if err != nil && ctx.Err() == nil {
			log.Warningf("%s: %v (retry %d)", key, err, q.Failures(key)+1)
		}
		q.Done(key, err)
	}
}

// NewRecorder starts sending Events through client as component on node
// and returns the recorder and a function that stops the sending. Events
// get a client of their own (with its own rate limiter) so that a burst of
// them never takes request budget from the volume work.
func NewRecorder(ctx context.Context, client kubernetes.Interface, component, node string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: node}), b.Shutdown
}

// OrDefault returns v, or def when v is the zero value: the rule for every
// optional field of a controller's configuration.
func OrDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
