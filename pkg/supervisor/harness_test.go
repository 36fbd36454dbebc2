package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records what TestHarness reports, so that its failure path can be
// tested without failing this test.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	logs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprint(args...))
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestHarnessForwardsLogsAndStops(t *testing.T) {
	f := &fakeTB{TB: t}
	ctxc := make(chan context.Context, 1)
	stop, lt := testHarness(f, 5*time.Second, func(ctx context.Context) error {
		Logger(ctx).Info("hello harness")
		ctxc <- ctx
		<-ctx.Done()
		return nil
	})
	ctx := recv(t, ctxc, "runnable")
	if DN(ctx) != "root.runnable" || LogTree(ctx) != lt {
		t.Errorf("runnable runs as %q in another tree", DN(ctx))
	}
	stop()
	if ctx.Err() == nil {
		t.Error("stop returned while the runnable's context is alive")
	}
	f.runCleanups() // a second stop must be harmless
	if len(f.errors) != 0 {
		t.Errorf("harness reported errors: %q", f.errors)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	found := false
	for _, l := range f.logs {
		if strings.Contains(l, "root.runnable") && strings.HasSuffix(l, "] hello harness") {
			found = true
		}
	}
	if !found {
		t.Errorf("log line not forwarded to t.Log; got %q", f.logs)
	}
	n := len(f.logs)
	lt.LeveledFor("late").Info("after the test") // must not reach t.Log any more
	if len(f.logs) != n {
		t.Error("logs forwarded after the harness stopped")
	}
}

func TestHarnessReportsStuckRunnable(t *testing.T) {
	f := &fakeTB{TB: t}
	release := make(chan struct{})
	defer close(release)
	running := make(chan struct{})
	testHarness(f, 100*time.Millisecond, func(ctx context.Context) error {
		return Run(ctx, "stubborn", func(ctx context.Context) error {
			Signal(ctx, SignalHealthy)
			close(running)
			<-release // ignores its context
			return nil
		})
	})
	<-running // stopped any earlier, the tree would end cleanly
	f.runCleanups()
	if len(f.errors) != 1 {
		t.Fatalf("harness reported %d errors, want 1: %q", len(f.errors), f.errors)
	}
	for _, want := range []string{"did not stop", "root.runnable.stubborn: running", "goroutine "} {
		if !strings.Contains(f.errors[0], want) {
			t.Errorf("report lacks %q:\n%s", want, f.errors[0])
		}
	}
}

// TestNoGoroutineLeak runs a busy tree (failures, restarts pending in
// backoff, deep children) and checks that after Wait no goroutine of it is
// left, by the goroutine count returning to its baseline.
func TestNoGoroutineLeak(t *testing.T) {
	base := settledGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 100)
	var deep func(depth int) Runnable
	deep = func(depth int) Runnable {
		return func(ctx context.Context) error {
			if depth > 0 {
				if err := RunGroup(ctx, map[string]Runnable{"a": deep(depth - 1), "b": deep(depth - 1)}); err != nil {
					return err
				}
			}
			started <- struct{}{}
			<-ctx.Done()
			return nil
		}
	}
	s := New(ctx, func(ctx context.Context) error {
		err := RunGroup(ctx, map[string]Runnable{
			"tree":    deep(3),
			"flaky":   func(context.Context) error { return errors.New("always") },
			"backoff": func(context.Context) error { return errors.New("long backoff") },
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, WithBackoff(time.Millisecond, time.Hour))
	for range 15 { // 1+2+4+8 nodes in the deep tree
		recv(t, started, "deep tree")
	}
	if runtime.NumGoroutine() <= base+15 {
		t.Fatalf("only %d goroutines while the tree runs; the leak check would prove nothing", runtime.NumGoroutine())
	}
	cancel()
	s.Wait()
	waitFor(t, fmt.Sprintf("goroutine count to return to %d", base), func() bool { return runtime.NumGoroutine() <= base })
}

// TestPropagatePanic runs a tree with WithPropagatePanic in a child process
// (the panic kills it) and checks that the process died of the panic.
func TestPropagatePanic(t *testing.T) {
	if os.Getenv("SUPERVISOR_PROPAGATE_PANIC_CHILD") == "1" {
		s := New(context.Background(), func(ctx context.Context) error {
			panic("propagated boom")
		}, WithPropagatePanic())
		s.Wait()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPropagatePanic$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SUPERVISOR_PROPAGATE_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("child did not crash (err %v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "panic: propagated boom") {
		t.Errorf("child output lacks the panic:\n%s", out)
	}
}

// settledGoroutines returns the goroutine count once it has stopped changing
// (goroutines of earlier tests may still be on their way out).
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			break
		}
		n = m
	}
	return n
}
