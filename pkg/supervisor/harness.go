package supervisor

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"source.plinth.dev/pkg/logtree"
)

// harnessStopTimeout bounds how long TestHarness waits for the tree to stop.
const harnessStopTimeout = 10 * time.Second

// TestHarness runs r as the child "runnable" (DN root.runnable) of a fresh
// tree whose logs also go to t.Log. The returned function cancels the tree
// and waits for every runnable to return; it also runs at test cleanup. A
// tree that does not stop within a few seconds fails the test with the
// state of the tree and a goroutine dump.
//
// opts are passed to New (e.g. WithBackoff for fast restarts); a
// WithLogTree among them is overridden by the harness's own tree.
func TestHarness(t testing.TB, r Runnable, opts ...Option) (context.CancelFunc, *logtree.LogTree) {
	t.Helper()
	return testHarness(t, harnessStopTimeout, r, opts...)
}

func testHarness(t testing.TB, stopTimeout time.Duration, r Runnable, opts ...Option) (context.CancelFunc, *logtree.LogTree) {
	tl := &testLogWriter{t: t}
	lt := logtree.New(logtree.WithSink(tl))
	ctx, cancel := context.WithCancel(context.Background())
	root := func(ctx context.Context) error {
		if err := Run(ctx, "runnable", r); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	s := New(ctx, root, append(slices.Clone(opts), WithLogTree(lt))...)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			timer := time.NewTimer(stopTimeout)
			defer timer.Stop()
			select {
			case <-s.Done():
			case <-timer.C:
				t.Errorf("supervision tree did not stop within %s of cancellation; tree: %s\n\ngoroutines:\n%s",
					stopTimeout, formatStatus(s.Status()), allStacks())
			}
			tl.disable()
		})
	}
	t.Cleanup(stop)
	return stop, lt
}

func formatStatus(st []NodeStatus) string {
	var b strings.Builder
	for _, n := range st {
		fmt.Fprintf(&b, "\n  %s: %s", n.DN, n.State)
	}
	return b.String()
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// testLogWriter forwards the tree's formatted lines to t.Log until disabled:
// testing panics on t.Log after a test has finished, and stray goroutines
// may still log then.
type testLogWriter struct {
	mu       sync.Mutex
	t        testing.TB
	disabled bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.disabled {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLogWriter) disable() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.disabled = true
}
