// Package supervisor runs the long-lived parts of a node (its "runnables")
// as a tree, restarting whatever fails.
//
// Why a tree: components depend on each other in a hierarchy (the
// Kubernetes runnable builds a clientset that its controllers share). When a
// runnable fails, everything it started is stale, so its whole subtree is
// stopped (deepest first) and awaited before the runnable itself is restarted
// with exponential backoff. Siblings and ancestors keep running.
//
// Rules for a runnable:
//   - It runs until its context is cancelled, then returns promptly.
//   - It starts children with Run/RunGroup using the context it was given.
//   - It calls Signal(ctx, SignalHealthy) once it is ready; that resets the
//     backoff if it then stays healthy for a while.
//   - A runnable that has finished its job calls Signal(ctx, SignalDone) and
//     returns nil. That ends it for good: it is not restarted, and its
//     children (if any) are stopped, because "done" means the runnable and its
//     subtree have nothing left to do.
//   - Returning an error, returning nil without SignalDone, or panicking is a
//     failure and causes a restart.
//
// A node's context is cancelled only by the supervisor: when the node's
// parent stops or restarts, when the node itself has returned, or when the
// context given to New ends. The tree is stopped deepest first: a runnable's
// context is cancelled only once all its descendants have returned, so a
// parent may still use resources its children rely on while they shut down.
//
// A runnable that serves gRPC ends with ServeGRPC, so that every server of
// the node signals Healthy the same way and stops by one bounded rule:
// calls in flight may finish, but not for longer than GRPCStopTimeout.
//
// All tree state is owned by one goroutine per Supervisor (an actor); the
// exported functions talk to it over channels. There is no global state: the
// node a context belongs to travels in the context.
package supervisor

import (
	"context"
	"fmt"
	"time"

	"source.plinth.dev/pkg/logtree"
)

// Runnable is a supervised function. See the package documentation for the
// contract.
type Runnable func(ctx context.Context) error

// SignalType is what a runnable reports about itself with Signal.
type SignalType int

const (
	// SignalHealthy reports that the runnable has started and works.
	SignalHealthy SignalType = iota
	// SignalDone reports that the runnable has finished its job; it must
	// then return nil and will not be restarted.
	SignalDone
)

func (st SignalType) String() string {
	switch st {
	case SignalHealthy:
		return "Healthy"
	case SignalDone:
		return "Done"
	}
	return fmt.Sprintf("SignalType(%d)", int(st))
}

// Default backoff: quick first retry (most failures are transient, e.g. an
// API server restarting), capped so that a broken component is retried
// every half minute rather than hammered, and forgiven after it has been
// healthy for as long as the cap.
const (
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	DefaultBackoffReset   = 30 * time.Second
)

// minBackoff is the smallest restart delay WithBackoff accepts.
const minBackoff = time.Millisecond

// stuckWarning is how long a cancelled runnable may take to return before
// the supervisor logs a warning naming it (once).
const stuckWarning = 5 * time.Second

// Supervisor is a running supervision tree.
type Supervisor struct {
	ctx            context.Context
	lt             *logtree.LogTree
	propagatePanic bool
	backoffInitial time.Duration
	backoffMax     time.Duration
	backoffReset   time.Duration
	jitter         bool
	restartHook    func(dn string)

	// events carries everything that changes the tree to the processor.
	events chan any
	// done is closed by the processor when the tree has stopped.
	done chan struct{}

	// Owned by the processor goroutine.
	root         *node
	shuttingDown bool
}

// Option configures New.
type Option func(*Supervisor)

// WithLogTree makes the tree log into lt (default: a fresh logtree.New()).
func WithLogTree(lt *logtree.LogTree) Option { return func(s *Supervisor) { s.lt = lt } }

// WithPropagatePanic lets a panicking runnable crash the process instead of
// being recovered and restarted. Useful when debugging, where the original
// panic matters more than availability.
func WithPropagatePanic() Option { return func(s *Supervisor) { s.propagatePanic = true } }

// WithBackoff sets the restart delay after the first failure (initial) and
// its upper bound (limit); each further failure in a row doubles it. Delays
// set this way have no jitter, so tests can rely on them. Without this
// option the delays are DefaultBackoffInitial..DefaultBackoffMax plus up to
// 20% random jitter, so that runnables failing together do not retry in
// lockstep. An initial delay below 1ms is raised to 1ms so that a crash loop
// cannot spin the CPU.
func WithBackoff(initial, limit time.Duration) Option {
	return func(s *Supervisor) {
		s.backoffInitial = max(initial, minBackoff)
		s.backoffMax = max(limit, s.backoffInitial)
		s.jitter = false
	}
}

// WithRestartHook makes the supervisor call hook with a runnable's name in
// the tree (its DN, e.g. "root.kubernetes.provisioner") each time it
// restarts that runnable, for metrics. The hook runs on the supervisor's
// own goroutine, so it must return at once and never call the
// supervisor. A hook rather than a counter of our own keeps this package
// free of any metrics library; Status reports the same counts on demand.
func WithRestartHook(hook func(dn string)) Option {
	return func(s *Supervisor) { s.restartHook = hook }
}

// WithBackoffReset sets how long a runnable must have been healthy
// (SignalHealthy) before failing for its backoff to start again from the
// initial delay (default DefaultBackoffReset).
func WithBackoffReset(d time.Duration) Option { return func(s *Supervisor) { s.backoffReset = d } }

// New starts root as the runnable "root" and returns immediately. The tree
// runs until ctx ends (or root signals Done and returns). A nil root panics.
func New(ctx context.Context, root Runnable, opts ...Option) *Supervisor {
	if root == nil {
		panic("supervisor.New: nil root runnable")
	}
	s := &Supervisor{
		ctx:            ctx,
		backoffInitial: DefaultBackoffInitial,
		backoffMax:     DefaultBackoffMax,
		backoffReset:   DefaultBackoffReset,
		jitter:         true,
		events:         make(chan any, 16),
		done:           make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.lt == nil {
		s.lt = logtree.New()
	}
	s.root = s.newNode(nil, "root", root, context.WithoutCancel(ctx))
	go s.process()
	return s
}

// Wait blocks until the tree has stopped: every runnable has returned after
// the context of New ended (or root signalled Done and returned).
func (s *Supervisor) Wait() { <-s.done }

// Done returns a channel closed when the tree has stopped (see Wait).
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// LogTree returns the log tree the supervisor writes to.
func (s *Supervisor) LogTree() *logtree.LogTree { return s.lt }

// NodeStatus describes one runnable, for introspection and debugging.
type NodeStatus struct {
	DN logtree.DN
	// State is one of "running", "stopping" (returned, waiting for its
	// children), "backoff" (waiting to be restarted), "done", "stopped".
	State string
	// Healthy is whether the current incarnation signalled Healthy.
	Healthy bool
	// Restarts counts how often the runnable was restarted.
	Restarts int
}

// Status returns the state of every runnable in the tree, parents before
// children, siblings by name. It returns nil once the tree has stopped.
func (s *Supervisor) Status() []NodeStatus {
	reply := make(chan []NodeStatus, 1)
	if !s.send(statusRequest{reply: reply}) {
		return nil
	}
	select {
	case st := <-reply:
		return st
	case <-s.done:
		return nil
	}
}

// send hands ev to the processor; it reports false if the tree has stopped.
// events is buffered, so a request may be accepted into the buffer just as
// the processor exits: callers waiting for a reply must also watch done.
func (s *Supervisor) send(ev any) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.events <- ev:
		return true
	case <-s.done:
		return false
	}
}
