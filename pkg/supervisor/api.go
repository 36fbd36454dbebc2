package supervisor

import (
	"context"
	"testing"
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

// Supervisor is a running supervision tree.
type Supervisor struct{}

// Option configures New.
type Option func(*Supervisor)

// WithLogTree makes the tree log into lt (default: a fresh logtree.New()).
func WithLogTree(lt *logtree.LogTree) Option { return func(*Supervisor) {} }

// WithPropagatePanic lets a panicking runnable crash the process instead of
// being recovered and restarted. Useful in tests and debugging, where the
// original stack matters more than availability.
func WithPropagatePanic() Option { return func(*Supervisor) {} }

// WithBackoff sets the restart delay after the first failure (initial) and
// its upper bound (max); each further failure doubles it. Delays set this
// way have no jitter, so tests can rely on them.
func WithBackoff(initial, max time.Duration) Option { return func(*Supervisor) {} }

// New starts root as the runnable "root" and returns immediately. The tree
// runs until ctx ends.
func New(ctx context.Context, root Runnable, opts ...Option) *Supervisor { return &Supervisor{} }

// Wait blocks until the tree has stopped: every runnable has returned after
// ctx of New ended (or root signalled Done and returned).
func (s *Supervisor) Wait() {}

// Run starts r as a child called name of the runnable that owns ctx. name
// must be a DNS label (lower-case letters, digits and '-', at most 63
// characters) and unique among the children of this incarnation of the
// parent.
func Run(ctx context.Context, name string, r Runnable) error { return nil }

// RunGroup starts several children at once: either all of them start or,
// if any name is invalid or taken, none does.
func RunGroup(ctx context.Context, runnables map[string]Runnable) error { return nil }

// Signal reports the state of the runnable owning ctx. It panics if ctx
// does not come from a supervisor.
func Signal(ctx context.Context, s SignalType) {}

// Logger returns the logger of the runnable owning ctx, named after its DN.
func Logger(ctx context.Context) logtree.LeveledLogger { return nil }

// LogTree returns the log tree of the supervisor owning ctx.
func LogTree(ctx context.Context) *logtree.LogTree { return nil }

// DN returns the DN of the runnable owning ctx, e.g. "root.kubernetes.csi".
func DN(ctx context.Context) logtree.DN { return "" }

// TestHarness runs r as the child "runnable" of a fresh tree whose logs go
// to t.Log. The returned function cancels the tree and waits for it to
// stop; it also runs at test cleanup. A tree that does not stop within a few
// seconds fails the test.
func TestHarness(t testing.TB, r Runnable, opts ...Option) (context.CancelFunc, *logtree.LogTree) {
	return func() {}, logtree.New()
}
