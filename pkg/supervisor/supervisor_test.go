package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"source.plinth.dev/pkg/logtree"
)

func TestRestartAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    func(ctx context.Context) error
		logged  string
		isPanic bool
	}{
		{"error", func(context.Context) error { return errors.New("boom") }, "failed: boom", false},
		{"panic", func(context.Context) error { panic("boom") }, "failed: panic: boom", true},
		{"nil without Done", func(context.Context) error { return nil }, "failed: returned nil without signalling Done", false},
		{"Goexit", func(context.Context) error { runtime.Goexit(); return nil }, "failed: runnable exited via runtime.Goexit", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var starts atomic.Int32
			healthy := make(chan struct{})
			_, lt := TestHarness(t, func(ctx context.Context) error {
				if starts.Add(1) <= 2 {
					return tc.fail(ctx)
				}
				Signal(ctx, SignalHealthy)
				close(healthy)
				<-ctx.Done()
				return ctx.Err()
			}, WithBackoff(time.Millisecond, 10*time.Millisecond))
			recv(t, healthy, "third incarnation")
			if got := starts.Load(); got != 3 {
				t.Errorf("started %d times, want 3", got)
			}
			failures := logLinesWith(t, lt, "root.runnable", "failed: ")
			if len(failures) != 2 {
				t.Fatalf("logged failures %q, want 2", failures)
			}
			for _, f := range failures {
				if !strings.HasPrefix(f, tc.logged) {
					t.Errorf("failure logged as %q, want prefix %q", f, tc.logged)
				}
				if tc.isPanic && !strings.Contains(f, "goroutine ") {
					t.Errorf("panic logged without stack trace: %q", f)
				}
			}
			if got := logLinesWith(t, lt, "root.runnable", "restarting ("); len(got) != 2 {
				t.Errorf("restart log lines %q, want 2", got)
			}
		})
	}
}

// TestBackoffGrows checks both the computed delays (exact, from the log)
// and that real restarts honour them (lower bounds only, which cannot flake
// on a slow machine).
func TestBackoffGrows(t *testing.T) {
	const failures = 6
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	healthy := make(chan struct{})
	_, lt := TestHarness(t, func(ctx context.Context) error {
		mu.Lock()
		starts = append(starts, time.Now())
		n := len(starts)
		mu.Unlock()
		if n <= failures {
			return fmt.Errorf("failure %d", n)
		}
		close(healthy)
		<-ctx.Done()
		return nil
	}, WithBackoff(10*time.Millisecond, 160*time.Millisecond))
	recv(t, healthy, "the runnable to stop failing")

	want := []string{"10ms", "20ms", "40ms", "80ms", "160ms", "160ms"}
	var got []string
	for _, l := range logLinesWith(t, lt, "root.runnable", "restarting in ") {
		got = append(got, strings.TrimPrefix(l, "restarting in "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("backoff delays %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(starts); i++ {
		gap := starts[i].Sub(starts[i-1])
		min, _ := time.ParseDuration(want[i-1])
		if gap < min {
			t.Errorf("restart %d came %v after the failure, backoff was %v", i, gap, min)
		}
	}
	// Growth as observed: the capped gaps are 16 times the first delay, far
	// beyond scheduling noise between the first two starts.
	if first, last := starts[1].Sub(starts[0]), starts[failures].Sub(starts[failures-1]); last <= first {
		t.Errorf("gaps did not grow: first %v, last %v", first, last)
	}
}

func TestBackoffResetsAfterHealthyPeriod(t *testing.T) {
	var starts atomic.Int32
	finished := make(chan struct{})
	_, lt := TestHarness(t, func(ctx context.Context) error {
		switch starts.Add(1) {
		case 1, 2, 3: // fail fast: 10ms, 20ms, 40ms
			return errors.New("early")
		case 4: // healthy for longer than the reset period, then fail: back to 10ms
			Signal(ctx, SignalHealthy)
			time.Sleep(300 * time.Millisecond)
			return errors.New("after a healthy period")
		case 5: // healthy, but not for long enough (unless this goroutine stalls for the whole reset period): 20ms
			Signal(ctx, SignalHealthy)
			return errors.New("right after becoming healthy")
		}
		close(finished)
		<-ctx.Done()
		return nil
	}, WithBackoff(10*time.Millisecond, time.Second), WithBackoffReset(250*time.Millisecond))
	recv(t, finished, "sixth incarnation")
	var got []string
	for _, l := range logLinesWith(t, lt, "root.runnable", "restarting in ") {
		got = append(got, strings.TrimPrefix(l, "restarting in "))
	}
	if want := []string{"10ms", "20ms", "40ms", "10ms", "20ms"}; !slices.Equal(got, want) {
		t.Errorf("backoff delays %v, want %v", got, want)
	}
}

func TestJitterStaysNearBackoff(t *testing.T) {
	s := &Supervisor{backoffInitial: 100 * time.Millisecond, backoffMax: time.Second, jitter: true}
	n := &node{}
	for range 50 {
		n.backoff = 0
		d := s.nextBackoff(n)
		if d < 100*time.Millisecond || d > 120*time.Millisecond {
			t.Fatalf("jittered first delay %v outside [100ms, 120ms]", d)
		}
	}
}

// TestSubtreeStoppedBeforeRestart: when a runnable fails, its children and
// grandchildren are cancelled and have returned before it runs again, and
// the grandchild returns before the child is cancelled (deepest first).
func TestSubtreeStoppedBeforeRestart(t *testing.T) {
	type incarnation struct {
		grandchildCtx       context.Context
		grandchildReturned  atomic.Bool
		childSawGrandchild  atomic.Bool // child's ctx ended after the grandchild returned
		childReturned       atomic.Bool
		childCtxAtGrandExit atomic.Bool // child's ctx was still alive when the grandchild returned
	}
	var (
		mu   sync.Mutex
		incs []*incarnation
	)
	fail := make(chan struct{})
	restarted := make(chan *incarnation, 1)
	ready := make(chan struct{}, 2)
	TestHarness(t, func(ctx context.Context) error {
		inc := &incarnation{}
		mu.Lock()
		incs = append(incs, inc)
		first := len(incs) == 1
		mu.Unlock()
		if !first {
			restarted <- incs[0]
			<-ctx.Done()
			return nil
		}
		err := Run(ctx, "child", func(ctx context.Context) error {
			childCtx := ctx
			err := Run(ctx, "grandchild", func(ctx context.Context) error {
				inc.grandchildCtx = ctx
				ready <- struct{}{}
				<-ctx.Done()
				time.Sleep(20 * time.Millisecond) // a slow shutdown must still be awaited
				inc.childCtxAtGrandExit.Store(childCtx.Err() == nil)
				inc.grandchildReturned.Store(true)
				return ctx.Err()
			})
			if err != nil {
				return err
			}
			<-ctx.Done()
			inc.childSawGrandchild.Store(inc.grandchildReturned.Load())
			inc.childReturned.Store(true)
			return ctx.Err()
		})
		if err != nil {
			return err
		}
		<-fail
		return errors.New("parent fails")
	}, WithBackoff(time.Millisecond, time.Millisecond))
	recv(t, ready, "grandchild to start")
	close(fail)
	first := recv(t, restarted, "the parent to restart")
	if first.grandchildCtx.Err() == nil {
		t.Error("grandchild context still alive after parent restarted")
	}
	if !first.grandchildReturned.Load() || !first.childReturned.Load() {
		t.Errorf("parent restarted before its subtree returned (child %v, grandchild %v)", first.childReturned.Load(), first.grandchildReturned.Load())
	}
	if !first.childSawGrandchild.Load() || !first.childCtxAtGrandExit.Load() {
		t.Error("child was cancelled before its grandchild returned; want deepest first")
	}
}

func TestFailingChildRestartsAloneAndSiblingsKeepRunning(t *testing.T) {
	var parentStarts, childStarts atomic.Int32
	siblingCtx := make(chan context.Context, 1)
	childAgain := make(chan struct{})
	TestHarness(t, func(ctx context.Context) error {
		parentStarts.Add(1)
		err := RunGroup(ctx, map[string]Runnable{
			"flaky": func(ctx context.Context) error {
				if childStarts.Add(1) == 1 {
					return errors.New("flaky")
				}
				close(childAgain)
				<-ctx.Done()
				return nil
			},
			"steady": func(ctx context.Context) error {
				siblingCtx <- ctx
				<-ctx.Done()
				return nil
			},
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, WithBackoff(time.Millisecond, time.Millisecond))
	recv(t, childAgain, "flaky child to restart")
	sctx := recv(t, siblingCtx, "steady sibling to start")
	if sctx.Err() != nil {
		t.Error("sibling was stopped by the failure of its sibling")
	}
	if got := parentStarts.Load(); got != 1 {
		t.Errorf("parent started %d times, want 1", got)
	}
}

func TestDoneIsNotRestarted(t *testing.T) {
	var starts atomic.Int32
	grandchildCtx := make(chan context.Context, 1)
	var lt *logtree.LogTree
	_, lt = TestHarness(t, func(ctx context.Context) error {
		err := Run(ctx, "oneshot", func(ctx context.Context) error {
			starts.Add(1)
			if err := Run(ctx, "helper", func(ctx context.Context) error {
				grandchildCtx <- ctx
				<-ctx.Done()
				return nil
			}); err != nil {
				return err
			}
			// Signal from another goroutine: Signal returns only once
			// recorded, so returning right after is safe.
			done := make(chan struct{})
			go func() { Signal(ctx, SignalDone); close(done) }()
			<-done
			return nil
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, WithBackoff(time.Millisecond, time.Millisecond))
	gctx := recv(t, grandchildCtx, "helper to start")
	waitFor(t, "helper of a Done runnable to be cancelled", func() bool { return gctx.Err() != nil })
	// Several backoff periods: a restart would have happened by now.
	time.Sleep(50 * time.Millisecond)
	if got := starts.Load(); got != 1 {
		t.Errorf("Done runnable started %d times, want 1", got)
	}
	if got := logLinesWith(t, lt, "root.runnable.oneshot", "failed"); len(got) != 0 {
		t.Errorf("Done runnable logged failures: %q", got)
	}
}

// TestShutdownDeepestFirst: cancelling the context of New stops leaves
// before their parents, and Wait returns only when all have returned.
func TestShutdownDeepestFirst(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
	)
	started := make(chan struct{}, 4)
	leaf := func(name string, children map[string]Runnable) Runnable {
		return func(ctx context.Context) error {
			if len(children) > 0 {
				if err := RunGroup(ctx, children); err != nil {
					return err
				}
			}
			started <- struct{}{}
			<-ctx.Done()
			time.Sleep(5 * time.Millisecond) // make a wrong order likely to show
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(ctx, leaf("root", map[string]Runnable{
		"mid": leaf("mid", map[string]Runnable{
			"leaf1": leaf("leaf1", nil),
			"leaf2": leaf("leaf2", nil),
		}),
	}), WithLogTree(logtree.New()))
	for range 4 {
		recv(t, started, "tree to start")
	}
	cancel()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("tree did not stop: %v", s.Status())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 4 || order[2] != "mid" || order[3] != "root" {
		t.Errorf("stop order %v, want leaves, then mid, then root", order)
	}
	if st := s.Status(); st != nil {
		t.Errorf("Status after stop = %v, want nil", st)
	}
}

func TestRootDoneEndsTree(t *testing.T) {
	s := New(context.Background(), func(ctx context.Context) error {
		Signal(ctx, SignalDone)
		return nil
	})
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("tree whose root is Done did not stop")
	}
}

func TestStatus(t *testing.T) {
	ready := make(chan struct{})
	var s *Supervisor
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); s.Wait() }()
	s = New(ctx, func(ctx context.Context) error {
		err := RunGroup(ctx, map[string]Runnable{
			"b": func(ctx context.Context) error { <-ctx.Done(); return nil },
			"a": func(ctx context.Context) error {
				Signal(ctx, SignalHealthy)
				close(ready)
				<-ctx.Done()
				return nil
			},
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	recv(t, ready, "a to be healthy")
	got := s.Status()
	want := []NodeStatus{
		{DN: "root", State: "running"},
		{DN: "root.a", State: "running", Healthy: true},
		{DN: "root.b", State: "running"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Status() = %+v, want %+v", got, want)
	}
}

func TestContextAccessors(t *testing.T) {
	type seen struct {
		dn logtree.DN
		lt *logtree.LogTree
	}
	got := make(chan seen, 1)
	_, lt := TestHarness(t, func(ctx context.Context) error {
		err := Run(ctx, "kubernetes", func(ctx context.Context) error {
			return Run(ctx, "csi", func(ctx context.Context) error {
				Logger(ctx).Warningf("hello from %s", DN(ctx))
				got <- seen{DN(ctx), LogTree(ctx)}
				<-ctx.Done()
				return nil
			})
		})
		if err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return nil
	})
	sn := recv(t, got, "csi to start")
	if sn.dn != "root.runnable.kubernetes.csi" {
		t.Errorf("DN = %q", sn.dn)
	}
	if sn.lt != lt {
		t.Error("LogTree(ctx) is not the harness's tree")
	}
	r, err := lt.Read("root.runnable.kubernetes.csi", logtree.WithBacklog(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Backlog) != 1 || r.Backlog[0].Message != "hello from root.runnable.kubernetes.csi" || r.Backlog[0].File != "supervisor_test.go" {
		t.Errorf("Logger(ctx) entries: %+v", r.Backlog)
	}
}

func TestContextValuesInherited(t *testing.T) {
	type key struct{}
	got := make(chan any, 1)
	TestHarness(t, func(ctx context.Context) error {
		ctx = context.WithValue(ctx, key{}, "v")
		tctx, tcancel := context.WithTimeout(ctx, time.Millisecond)
		defer tcancel()
		err := Run(tctx, "child", func(ctx context.Context) error {
			time.Sleep(5 * time.Millisecond)
			if ctx.Err() != nil {
				got <- "child inherited the caller's deadline"
			} else {
				got <- ctx.Value(key{})
			}
			<-ctx.Done()
			return nil
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if v := recv(t, got, "child"); v != "v" {
		t.Errorf("child saw %v, want the caller's value and no deadline", v)
	}
}

func TestRunErrors(t *testing.T) {
	if err := Run(context.Background(), "x", func(context.Context) error { return nil }); err == nil {
		t.Error("Run with a foreign context succeeded")
	}
	var stale context.Context
	results := make(chan []error, 1)
	var starts atomic.Int32
	block := func(ctx context.Context) error { <-ctx.Done(); return nil }
	TestHarness(t, func(ctx context.Context) error {
		if starts.Add(1) == 1 {
			stale = ctx
			return errors.New("restart me")
		}
		errs := []error{
			Run(ctx, "", block),
			Run(ctx, "Upper", block),
			Run(ctx, "-lead", block),
			Run(ctx, "a.b", block),
			Run(ctx, strings.Repeat("a", 64), block),
			Run(ctx, "nilrunnable", nil),
			Run(ctx, "ok", block),
			Run(ctx, "ok", block), // duplicate
			RunGroup(ctx, map[string]Runnable{"fresh": block, "ok": block}),
			Run(stale, "late", block), // from a previous incarnation
		}
		results <- errs
		<-ctx.Done()
		return nil
	}, WithBackoff(time.Millisecond, time.Millisecond))
	errs := recv(t, results, "second incarnation")
	for i, err := range errs {
		wantErr := i != 6
		if (err != nil) != wantErr {
			t.Errorf("call %d: err = %v, want error: %v", i, err, wantErr)
		}
	}
	if errs[7] != nil && !strings.Contains(errs[7].Error(), "already has a child") {
		t.Errorf("duplicate error unclear: %v", errs[7])
	}
}

func TestRunGroupIsAtomic(t *testing.T) {
	var freshStarted atomic.Bool
	errc := make(chan error, 1)
	TestHarness(t, func(ctx context.Context) error {
		block := func(ctx context.Context) error { <-ctx.Done(); return nil }
		if err := Run(ctx, "taken", block); err != nil {
			return err
		}
		errc <- RunGroup(ctx, map[string]Runnable{
			"fresh": func(ctx context.Context) error { freshStarted.Store(true); <-ctx.Done(); return nil },
			"taken": block,
		})
		// If "fresh" had been started, this would fail as a duplicate.
		if err := Run(ctx, "fresh", block); err != nil {
			errc <- err
		}
		<-ctx.Done()
		return nil
	})
	if err := recv(t, errc, "RunGroup"); err == nil {
		t.Error("RunGroup with a taken name succeeded")
	}
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-errc:
		t.Errorf("a failed RunGroup left a child behind: %v", err)
	default:
	}
	if freshStarted.Load() {
		t.Error("a failed RunGroup started a runnable")
	}
}

func TestRunAfterTreeStopped(t *testing.T) {
	ctxc := make(chan context.Context, 1)
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, func(ctx context.Context) error {
		ctxc <- ctx
		<-ctx.Done()
		return nil
	})
	rctx := recv(t, ctxc, "root")
	cancel()
	s.Wait()
	err := Run(rctx, "late", func(context.Context) error { return nil })
	if !errors.Is(err, ErrTreeStopped) {
		t.Errorf("Run after stop: %v, want ErrTreeStopped", err)
	}
	Signal(rctx, SignalHealthy) // must not block or panic
}

func TestForeignContextPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"Signal": func() { Signal(context.Background(), SignalHealthy) },
		"Logger": func() { Logger(context.Background()) },
		"DN":     func() { DN(context.Background()) },
	} {
		func() {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "does not belong to a supervised runnable") {
					t.Errorf("%s: recovered %v", name, v)
				}
			}()
			f()
		}()
	}
}

// TestRestartHook checks that the hook hears of each restart, by the
// runnable's DN, as often as Status counts them.
func TestRestartHook(t *testing.T) {
	var mu sync.Mutex
	heard := map[string]int{}
	hook := func(dn string) { mu.Lock(); heard[dn]++; mu.Unlock() }
	var starts atomic.Int32
	steady := make(chan struct{})
	cancel, _ := TestHarness(t, func(ctx context.Context) error {
		if err := Run(ctx, "flaky", func(ctx context.Context) error {
			if starts.Add(1) <= 3 {
				return errors.New("flaky")
			}
			close(steady)
			<-ctx.Done()
			return nil
		}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, WithBackoff(time.Millisecond, time.Millisecond), WithRestartHook(hook))
	recv(t, steady, "flaky child to run after three failures")
	cancel()
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"root.runnable.flaky": 3}; !maps.Equal(heard, want) {
		t.Errorf("hook heard %v, want %v", heard, want)
	}
}
