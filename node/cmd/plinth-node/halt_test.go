package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAwaitTermEndsWhenOnlyDeafProcessesAreLeft plays init's halt in a PID
// namespace of its own (awaitTermHelper is its PID 1, with a procfs of
// that namespace): SIGTERM to every process, then awaitTerm. The
// processes are a node's at shutdown: many that end on SIGTERM (their
// zombies all come to init), one that handles it and takes a second to
// end, and, in case deaf, a container's first process without a handler
// (PID 1 of a PID namespace below, which the kernel does not give the
// signal) and a shell ignoring it with its child. The wait must give the
// handler its time (its marker is written) and end once only deaf
// processes are left, not at the end of its grace (20 s); with nothing
// deaf it ends when every process has.
func TestAwaitTermEndsWhenOnlyDeafProcessesAreLeft(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		deaf bool
		want string
	}{
		{"deaf", true, "outcome=only-deaf left=3"},
		{"none-deaf", false, "outcome=all-ended left=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "handled")
			env := []string{"MARKER=" + marker}
			if tc.deaf {
				env = append(env, "DEAF=1")
			}
			cmd := helperCmd("await-term", env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, exitStderr(err))
			}
			got := strings.TrimSpace(string(out))
			t.Logf("helper: %s", got)
			if got != tc.want {
				t.Errorf("awaitTerm: %q, want %q", got, tc.want)
			}
			if b, err := os.ReadFile(marker); err != nil || string(b) != "handled" {
				t.Errorf("the process handling SIGTERM did not finish before init went on (its marker: %q, %v): the wait did not give it its grace", b, err)
			}
		})
	}
}

// awaitTermHelper is the helper of TestAwaitTermEndsWhenOnlyDeafProcessesAreLeft,
// PID 1 of a new PID namespace in a new mount namespace.
func awaitTermHelper() int {
	must(unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	must(unix.Mount("proc", "/proc", "proc", 0, ""))
	// Stand in for PID 1's reaping of orphans even if the namespace
	// did not make us its init.
	must(unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	var started []*exec.Cmd
	start := func(c *exec.Cmd) {
		must(c.Start())
		started = append(started, c)
	}
	for range 100 {
		start(exec.Command("sleep", "1000"))
	}
	handler := exec.Command("sh", "-c", `trap 'sleep 1; printf handled > "$MARKER"; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	ready, err := handler.StdoutPipe()
	must(err)
	start(handler)
	buf := make([]byte, 6)
	_, err = ready.Read(buf)
	must(err)
	if os.Getenv("DEAF") != "" {
		container := exec.Command("sleep", "1000")
		container.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		start(container)
		start(exec.Command("sh", "-c", `trap '' TERM; sleep 1000; :`))
		// Let the shell set its disposition and start its child.
		time.Sleep(300 * time.Millisecond)
	}
	// The Cmds are never waited for: awaitTerm reaps their processes.
	// Its grace is far longer than the handler takes, and bounds the
	// wait when deaf processes are not told apart.
	_ = unix.Kill(-1, unix.SIGTERM)
	w := awaitTerm("/proc", 20*time.Second)
	name := map[termOutcome]string{termAllEnded: "all-ended", termOnlyDeaf: "only-deaf", termGraceOver: "grace-over"}[w.outcome]
	fmt.Printf("outcome=%s left=%d\n", name, len(w.left))
	_ = unix.Kill(-1, unix.SIGKILL)
	return 0
}
