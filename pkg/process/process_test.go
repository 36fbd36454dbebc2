package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// The tests run real processes (sh, sleep) under a real supervision tree.

// tree runs r as root.proc in a fresh tree with fast restarts.
func tree(t *testing.T, r supervisor.Runnable) (*supervisor.Supervisor, *logtree.LogTree, context.CancelFunc) {
	t.Helper()
	lt := logtree.New(logtree.WithSink(testWriter{t}))
	ctx, cancel := context.WithCancel(context.Background())
	s := supervisor.New(ctx, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "proc", r); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, supervisor.WithLogTree(lt), supervisor.WithBackoff(50*time.Millisecond, 200*time.Millisecond))
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.Done():
		case <-time.After(20 * time.Second):
			t.Errorf("tree did not stop: %v", s.Status())
		}
	})
	return s, lt, cancel
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func messages(t *testing.T, lt *logtree.LogTree) []string {
	t.Helper()
	r, err := lt.Read("root.proc", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range r.Backlog {
		out = append(out, e.Message)
	}
	return out
}

func count(msgs []string, prefix string) int {
	n := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func procStatus(s *supervisor.Supervisor) supervisor.NodeStatus {
	for _, n := range s.Status() {
		if n.DN == "root.proc" {
			return n
		}
	}
	return supervisor.NodeStatus{}
}

// processState is the state letter of pid in /proc ('Z' for a zombie), or
// 0 if there is no such process.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// readPIDs waits for file to hold n PIDs, one a line.
func readPIDs(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, "pids in "+file, func() bool {
		b, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err == nil {
				pids = append(pids, p)
			}
		}
		return len(pids) >= n
	})
	return pids
}

// TestOutputAndRestart: the child's lines land in the runnable's log, its
// exit fails the runnable, the supervisor restarts it, and the ended child
// is reaped (no zombie is left of any incarnation).
func TestOutputAndRestart(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	_, lt, _ := tree(t, Runnable(Spec{Path: "/bin/sh", Args: []string{"-c", "echo $$ >> " + pids + "; echo hello from child; echo oops >&2; exit 3"}}))
	// Each incarnation's stdout, stderr and exit are logged by different
	// goroutines, in no fixed order: wait for all three of each.
	// A missing stderr line or exit report times this out; the log is
	// then printed with the failure.
	var msgs []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the runnable's log: %q", msgs)
		}
	})
	waitFor(t, "three incarnations logged whole (stdout, stderr, exit)", func() bool {
		msgs = messages(t, lt)
		return count(msgs, "hello from child") >= 3 && count(msgs, "oops") >= 3 && count(msgs, "failed: /bin/sh (pid ") >= 3
	})
	for _, pid := range readPIDs(t, pids, 3)[:2] {
		if st := processState(pid); st != 0 {
			t.Errorf("ended child %d still in the process table (state %c)", pid, st)
		}
	}
}

// TestReadinessGates: Healthy only once Ready says so, not at exec.
func TestReadinessGates(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	// The check is a file the test creates: it decides when the child is
	// ready, so the test can look at the state before and after.
	s, lt, _ := tree(t, Runnable(Spec{
		Path:  "/bin/sleep",
		Args:  []string{"1000"},
		Ready: func(context.Context) error { _, err := os.Stat(release); return err },
	}))
	waitFor(t, "child started", func() bool { return count(messages(t, lt), "started /bin/sleep") == 1 })
	time.Sleep(300 * time.Millisecond)
	if st := procStatus(s); st.State != "running" || st.Healthy {
		t.Fatalf("before ready: %+v, want running and not healthy", st)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "healthy", func() bool { return procStatus(s).Healthy })
}

// TestReadyTimeoutRestarts: a child that never gets ready is killed and
// restarted, its group with it.
func TestReadyTimeoutRestarts(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	_, lt, _ := tree(t, Runnable(Spec{
		Path:         "/bin/sh",
		Args:         []string{"-c", "echo $$ >> " + pids + "; exec sleep 1000"},
		Ready:        func(context.Context) error { return errors.New("never") },
		ReadyTimeout: 200 * time.Millisecond,
		StopGrace:    time.Second,
	}))
	waitFor(t, "two starts", func() bool { return count(messages(t, lt), "started /bin/sh") >= 2 })
	first := readPIDs(t, pids, 1)[0]
	waitFor(t, "first incarnation gone", func() bool { return processState(first) == 0 })
}

// TestStopKillsGroup: on stop, a child that ignores SIGTERM is killed after
// the grace period together with the helper it started in its group, and
// the child is reaped before the runnable returns.
func TestStopKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	s, _, cancel := tree(t, Runnable(Spec{
		Path:      "/bin/sh",
		Args:      []string{"-c", "trap '' TERM; sleep 1000 & echo $$ $! > " + pids + "; wait"},
		StopGrace: 300 * time.Millisecond,
	}))
	p := readPIDs(t, pids, 2)
	child, helper := p[0], p[1]
	if processState(helper) == 0 {
		t.Fatal("helper not running")
	}
	start := time.Now()
	cancel()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("tree did not stop")
	}
	took := time.Since(start)
	if took < 300*time.Millisecond {
		t.Errorf("stopped after %s, before the grace period: SIGTERM should have been ignored", took)
	}
	if st := processState(child); st != 0 {
		t.Errorf("child %d left in the process table after stop (state %c)", child, st)
	}
	// The helper is reparented to the system's reaper once the child is
	// gone; killed, it is at most a zombie until that reaper collects it.
	waitFor(t, "helper killed", func() bool { st := processState(helper); return st == 0 || st == 'Z' })
}

// TestStopSendsTERM: a child that handles SIGTERM stops cleanly and fast.
func TestStopSendsTERM(t *testing.T) {
	s, lt, cancel := tree(t, Runnable(Spec{
		Path: "/bin/sh",
		// sleep in the background so the shell runs its trap at once.
		Args: []string{"-c", "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.05; done"},
	}))
	waitFor(t, "child up", func() bool { return count(messages(t, lt), "up") == 1 })
	start := time.Now()
	cancel()
	<-s.Done()
	if took := time.Since(start); took > DefaultStopGrace/2 {
		t.Errorf("stop took %s: SIGTERM was not acted on", took)
	}
	if count(messages(t, lt), "got TERM") != 1 {
		t.Errorf("child did not report SIGTERM: %q", messages(t, lt))
	}
}

func TestRunOneShot(t *testing.T) {
	lt := logtree.New()
	log := lt.LeveledFor("oneshot")
	ctx := context.Background()
	if err := Run(ctx, log, Spec{Path: "/bin/sh", Args: []string{"-c", "echo imported"}}); err != nil {
		t.Fatalf("exit 0: %v", err)
	}
	err := Run(ctx, log, Spec{Path: "/bin/sh", Args: []string{"-c", "exit 4"}})
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Fatalf("exit 4: %v, want an exit error with code 4", err)
	}
	if err := Run(ctx, log, Spec{Path: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "starting /nonexistent") {
		t.Fatalf("missing program: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := Run(cctx, log, Spec{Path: "/bin/sleep", Args: []string{"1000"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("cancelled run not stopped promptly")
	}
	r, _ := lt.Read("oneshot", logtree.WithBacklog(logtree.BacklogAll))
	found := false
	for _, e := range r.Backlog {
		found = found || e.Message == "imported"
	}
	if !found {
		t.Error("output of the one-shot command not logged")
	}
}

func TestUnixSocketReady(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ready := UnixSocketReady(path)
	if err := ready(context.Background()); err == nil {
		t.Fatal("ready before anything listens")
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := ready(context.Background()); err == nil {
		t.Fatal("ready while bound but not listening")
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	if err := ready(context.Background()); err != nil {
		t.Fatalf("not ready while listening: %v", err)
	}
}
