package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"source.plinth.dev/pkg/dnsname"
	"source.plinth.dev/pkg/logtree"
)

// ErrTreeStopped is returned by Run and RunGroup when the supervision tree
// has already stopped.
var ErrTreeStopped = errors.New("supervision tree has stopped")

func refFrom(ctx context.Context) (nodeRef, bool) {
	ref, ok := ctx.Value(ctxKey{}).(nodeRef)
	return ref, ok
}

func mustRef(ctx context.Context, fn string) nodeRef {
	ref, ok := refFrom(ctx)
	if !ok {
		panic(fmt.Sprintf("supervisor.%s: context does not belong to a supervised runnable", fn))
	}
	return ref
}

// Run starts r as a child called name of the runnable that owns ctx. name
// must be a DNS label (lower-case letters, digits and '-', at most 63
// characters, no leading or trailing '-') and unique among the children of
// this incarnation of the parent, even finished ones.
//
// The child keeps the values of ctx but not its cancellation or deadline:
// it is stopped by the supervisor, when its parent returns or is stopped.
func Run(ctx context.Context, name string, r Runnable) error {
	return RunGroup(ctx, map[string]Runnable{name: r})
}

// RunGroup starts several children at once (in name order): either all of
// them start or, if any name is invalid or taken, none does.
func RunGroup(ctx context.Context, runnables map[string]Runnable) error {
	ref, ok := refFrom(ctx)
	if !ok {
		return errors.New("starting runnables: context does not belong to a supervised runnable")
	}
	names := make([]string, 0, len(runnables))
	for name, r := range runnables {
		// Runnable names become DN parts, metric labels and file names,
		// so they are kept to the most portable alphabet.
		if err := dnsname.CheckLabel(name); err != nil {
			return fmt.Errorf("starting runnable %q under %s: invalid name, want a DNS label: %w", name, ref.n.dn, err)
		}
		if r == nil {
			return fmt.Errorf("starting runnable %q under %s: nil Runnable", name, ref.n.dn)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	req := runRequest{
		parent: ref,
		base:   context.WithoutCancel(ctx),
		names:  names,
		reply:  make(chan error, 1),
	}
	for _, name := range names {
		req.runners = append(req.runners, runnables[name])
	}
	s := ref.n.s
	stopped := fmt.Errorf("starting runnables %v under %s: %w", names, ref.n.dn, ErrTreeStopped)
	if !s.send(req) {
		return stopped
	}
	var err error
	select {
	case err = <-req.reply:
	case <-s.done:
		// The processor has stopped; it may still have answered first.
		select {
		case err = <-req.reply:
		default:
			return stopped
		}
	}
	if err != nil {
		return fmt.Errorf("starting runnables %v: %w", names, err)
	}
	return nil
}

// Signal reports the state of the runnable owning ctx. It returns once the
// supervisor has recorded the signal, so a runnable may Signal(Done) from
// any goroutine and then return nil. Signals from an incarnation that has
// already returned are ignored. Signal panics if ctx does not come from a
// supervisor or st is unknown: both are programming errors.
func Signal(ctx context.Context, st SignalType) {
	ref := mustRef(ctx, "Signal")
	if st != SignalHealthy && st != SignalDone {
		panic(fmt.Sprintf("supervisor.Signal: unknown signal %v", st))
	}
	req := signalRequest{ref: ref, sig: st, reply: make(chan struct{})}
	s := ref.n.s
	if !s.send(req) {
		return
	}
	select {
	case <-req.reply:
	case <-s.done:
	}
}

// Logger returns the logger of the runnable owning ctx, named after its DN.
// It panics if ctx does not come from a supervisor.
func Logger(ctx context.Context) logtree.LeveledLogger {
	return mustRef(ctx, "Logger").n.logger
}

// LogTree returns the log tree of the supervisor owning ctx. It panics if
// ctx does not come from a supervisor.
func LogTree(ctx context.Context) *logtree.LogTree {
	return mustRef(ctx, "LogTree").n.s.lt
}

// DN returns the DN of the runnable owning ctx, e.g. "root.csi.registration".
// It panics if ctx does not come from a supervisor.
func DN(ctx context.Context) logtree.DN {
	return mustRef(ctx, "DN").n.dn
}
