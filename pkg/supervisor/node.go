package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"source.plinth.dev/pkg/logtree"
)

type nodeState int

const (
	stateRunning nodeState = iota // goroutine alive
	stateExited                   // returned; waiting for its subtree to stop
	stateBackoff                  // failed, subtree gone, restart timer armed
	stateDone                     // signalled Done and returned; final
	stateStopped                  // stopped by the supervisor; final
)

func (st nodeState) String() string {
	return [...]string{"running", "stopping", "backoff", "done", "stopped"}[st]
}

// outcome is how a runnable's incarnation ended, decided when it returns and
// acted on once its subtree has stopped.
type outcome int

const (
	outcomeFailed outcome = iota
	outcomeDone
	outcomeStopped
)

// node is one runnable in the tree. Apart from the immutable identity
// fields, it is only touched by the processor goroutine.
type node struct {
	// Immutable.
	s        *Supervisor
	name     string
	dn       logtree.DN
	parent   *node
	runnable Runnable
	logger   logtree.LeveledLogger
	// base carries the values of the context the node was started from,
	// without its cancellation: the supervisor alone decides when a node
	// stops.
	base context.Context

	// Current incarnation.
	gen          uint64
	ctx          context.Context
	cancel       context.CancelFunc
	state        nodeState
	outcome      outcome
	children     map[string]*node
	healthy      bool
	healthySince time.Time
	doneSignaled bool
	cancelled    bool // ctx of this incarnation has been cancelled
	cancelledAt  time.Time
	warnedStuck  bool
	exitedAt     time.Time

	// stopping: the node must stop for good (its parent is stopping or the
	// tree shuts down); it will not be restarted and may not add children.
	stopping bool

	// Across incarnations.
	backoff  time.Duration // last delay used; 0 after a reset
	restarts int
	timer    *time.Timer
}

// ctxKey is the context key under which a node's context carries nodeRef.
type ctxKey struct{}

// nodeRef identifies one incarnation of a node.
type nodeRef struct {
	n   *node
	gen uint64
}

// Events and requests handled by the processor.
type (
	exitEvent struct {
		n        *node
		gen      uint64
		err      error
		panicked bool
		stack    []byte
	}
	restartEvent struct {
		n   *node
		gen uint64
	}
	runRequest struct {
		parent  nodeRef
		base    context.Context
		names   []string
		runners []Runnable
		reply   chan error
	}
	signalRequest struct {
		ref   nodeRef
		sig   SignalType
		reply chan struct{}
	}
	statusRequest struct {
		reply chan []NodeStatus
	}
)

func (s *Supervisor) newNode(parent *node, name string, r Runnable, base context.Context) *node {
	dn := logtree.DN(name)
	if parent != nil {
		dn = parent.dn.Child(name)
	}
	return &node{
		s:        s,
		name:     name,
		dn:       dn,
		parent:   parent,
		runnable: r,
		logger:   s.lt.LeveledFor(dn),
		base:     base,
	}
}

// process is the processor goroutine: the only code that mutates the tree.
func (s *Supervisor) process() {
	defer close(s.done)
	ctxDone := s.ctx.Done()
	stuck := time.NewTicker(time.Second)
	defer stuck.Stop()
	s.start(s.root)
	for {
		select {
		case <-ctxDone:
			ctxDone = nil
			s.shuttingDown = true
			s.root.logger.Infof("context ended (%v), stopping the tree", context.Cause(s.ctx))
			s.markStopping(s.root)
		case ev := <-s.events:
			s.handle(ev)
		case <-stuck.C:
			s.warnStuck(s.root)
		}
		s.reconcile(s.root)
		if s.root.state == stateDone || s.root.state == stateStopped {
			return
		}
	}
}

func (s *Supervisor) handle(ev any) {
	switch ev := ev.(type) {
	case exitEvent:
		s.handleExit(ev)
	case restartEvent:
		n := ev.n
		if n.state != stateBackoff || n.gen != ev.gen || n.stopping {
			return // superseded: the node was stopped meanwhile
		}
		n.timer = nil
		n.restarts++
		n.logger.Infof("restarting (restart #%d)", n.restarts)
		if s.restartHook != nil {
			s.restartHook(string(n.dn))
		}
		s.start(n)
	case runRequest:
		ev.reply <- s.handleRun(ev)
	case signalRequest:
		n := ev.ref.n
		if n.gen == ev.ref.gen && n.state == stateRunning {
			switch ev.sig {
			case SignalHealthy:
				if !n.healthy {
					n.healthy = true
					n.healthySince = time.Now()
					n.logger.V(1).Info("healthy")
				}
			case SignalDone:
				n.doneSignaled = true
			}
		}
		close(ev.reply)
	case statusRequest:
		var out []NodeStatus
		var walk func(n *node)
		walk = func(n *node) {
			out = append(out, NodeStatus{DN: n.dn, State: n.state.String(), Healthy: n.healthy, Restarts: n.restarts})
			for _, name := range sortedNames(n.children) {
				walk(n.children[name])
			}
		}
		walk(s.root)
		ev.reply <- out
	default:
		panic(fmt.Sprintf("supervisor: unknown event %T", ev))
	}
}

func sortedNames(m map[string]*node) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// start begins a new incarnation of n.
func (s *Supervisor) start(n *node) {
	n.gen++
	ctx := context.WithValue(n.base, ctxKey{}, nodeRef{n: n, gen: n.gen})
	n.ctx, n.cancel = context.WithCancel(ctx)
	n.state = stateRunning
	n.children = make(map[string]*node)
	n.healthy = false
	n.doneSignaled = false
	n.cancelled = false
	n.warnedStuck = false
	go s.runNode(n, n.ctx, n.gen)
}

// runNode runs one incarnation and reports how it ended. The report is sent
// from a defer so that it also happens on runtime.Goexit (e.g. t.FailNow
// inside a runnable) and, with WithPropagatePanic, before the panic crashes
// the process.
func (s *Supervisor) runNode(n *node, ctx context.Context, gen uint64) {
	ev := exitEvent{n: n, gen: gen}
	returned := false
	defer func() {
		if !s.propagatePanic {
			if v := recover(); v != nil {
				ev.panicked = true
				ev.err = fmt.Errorf("panic: %v", v)
				ev.stack = debug.Stack()
			}
		}
		if !returned && !ev.panicked {
			ev.err = errors.New("runnable exited via runtime.Goexit (t.FailNow?) or an unrecovered panic")
		}
		s.events <- ev
	}()
	ev.err = n.runnable(ctx)
	returned = true
}

func (s *Supervisor) handleExit(ev exitEvent) {
	n := ev.n
	if n.gen != ev.gen || n.state != stateRunning {
		panic(fmt.Sprintf("supervisor: stale exit of %s (gen %d, current %d, %s)", n.dn, ev.gen, n.gen, n.state))
	}
	n.state = stateExited
	n.exitedAt = time.Now()
	switch {
	case n.stopping || n.cancelled:
		n.outcome = outcomeStopped
		if ev.err != nil && !errors.Is(ev.err, context.Canceled) {
			n.logger.Infof("stopped (returned: %v)", ev.err)
		} else {
			n.logger.V(1).Info("stopped")
		}
	case ev.panicked:
		n.outcome = outcomeFailed
		n.logger.Errorf("failed: %v\n%s", ev.err, ev.stack)
	case ev.err != nil:
		n.outcome = outcomeFailed
		n.logger.Errorf("failed: %v", ev.err)
	case n.doneSignaled:
		n.outcome = outcomeDone
		n.logger.V(1).Info("done")
	default:
		n.outcome = outcomeFailed
		n.logger.Error("failed: returned nil without signalling Done")
	}
	// Whatever the outcome, what the node started must go.
	for _, c := range n.children {
		s.markStopping(c)
	}
}

// markStopping dooms n and its subtree: nothing in it will be restarted.
// reconcile then cancels the subtree deepest first.
func (s *Supervisor) markStopping(n *node) {
	n.stopping = true
	if n.state == stateBackoff {
		n.timer.Stop()
		n.timer = nil
		n.state = stateStopped
		n.logger.Info("not restarting: stopping")
	}
	for _, c := range n.children {
		s.markStopping(c)
	}
}

// reconcile walks the subtree of n bottom-up, cancels stopping nodes whose
// descendants have all returned, and settles nodes that have returned once
// their subtree is gone. It reports whether any goroutine in the subtree is
// still running.
func (s *Supervisor) reconcile(n *node) bool {
	childLive := false
	for _, c := range n.children {
		if s.reconcile(c) {
			childLive = true
		}
	}
	switch {
	case n.state == stateRunning:
		if n.stopping && !n.cancelled && !childLive {
			n.cancelled = true
			n.cancelledAt = time.Now()
			n.cancel()
		}
		return true
	case n.state == stateExited && !childLive:
		s.settle(n)
	}
	return childLive
}

// settle acts on the outcome of a returned node whose subtree has stopped.
func (s *Supervisor) settle(n *node) {
	// Stray goroutines the runnable left behind see their context end.
	n.cancel()
	n.cancelled = true
	switch {
	case n.outcome == outcomeDone:
		n.state = stateDone
	case n.outcome == outcomeStopped || n.stopping:
		n.state = stateStopped
	default:
		if n.healthy && n.exitedAt.Sub(n.healthySince) >= s.backoffReset {
			n.backoff = 0
		}
		delay := s.nextBackoff(n)
		n.state = stateBackoff
		n.logger.Infof("restarting in %s", delay.Round(time.Millisecond))
		ev := restartEvent{n: n, gen: n.gen}
		n.timer = time.AfterFunc(delay, func() {
			select {
			case s.events <- ev:
			case <-s.done:
			}
		})
	}
}

// nextBackoff advances n's backoff and returns the delay before its next
// start: the initial delay after a reset, then doubling up to the cap, plus
// jitter unless WithBackoff asked for exact delays.
func (s *Supervisor) nextBackoff(n *node) time.Duration {
	if n.backoff == 0 {
		n.backoff = s.backoffInitial
	} else {
		n.backoff = min(2*n.backoff, s.backoffMax)
	}
	delay := n.backoff
	if s.jitter && delay > 0 {
		delay += rand.N(delay/5 + 1)
	}
	return delay
}

// warnStuck logs, once per incarnation, runnables that ignore their
// cancelled context: they block the restart or shutdown of everything above
// them, and without this line that is very hard to diagnose.
func (s *Supervisor) warnStuck(n *node) {
	for _, c := range n.children {
		s.warnStuck(c)
	}
	if n.state == stateRunning && n.cancelled && !n.warnedStuck && time.Since(n.cancelledAt) > stuckWarning {
		n.warnedStuck = true
		n.logger.Warningf("still running %s after its context was cancelled; its parent cannot stop or restart until it returns", stuckWarning)
	}
}

// handleRun adds children to a running node, all or nothing.
func (s *Supervisor) handleRun(req runRequest) error {
	p := req.parent.n
	if p.gen != req.parent.gen || p.state != stateRunning {
		return fmt.Errorf("%s is no longer running", p.dn)
	}
	if p.stopping {
		return fmt.Errorf("%s is stopping", p.dn)
	}
	for i, name := range req.names {
		if _, ok := p.children[name]; ok {
			return fmt.Errorf("%s already has a child called %q", p.dn, name)
		}
		if slices.Contains(req.names[:i], name) {
			return fmt.Errorf("name %q given twice", name)
		}
	}
	for i, name := range req.names {
		c := s.newNode(p, name, req.runners[i], req.base)
		p.children[name] = c
		s.start(c)
	}
	return nil
}
