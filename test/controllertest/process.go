package controllertest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/pkg/tether"
	"source.plinth.dev/test/launch"
)

// NodeBinEnv names the environment variable that points at a prebuilt
// plinth-node. The kernel-test VM has no Go toolchain, so test-kernel.sh
// builds a static one and sets it there.
const NodeBinEnv = "PLINTH_NODE_BIN"

// nodeBinary is plinth-node as PlinthNodeBinary built it: once per test
// binary, in dir, which Tests' Run removes after the tests.
var nodeBinary struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// PlinthNodeBinary builds plinth-node once per test binary (unless
// $PLINTH_NODE_BIN names one) and returns its path. The build is removed
// when the tests end (a package's TestMain runs them through Tests).
func PlinthNodeBinary() (string, error) {
	if bin := os.Getenv(NodeBinEnv); bin != "" {
		return bin, nil
	}
	nodeBinary.once.Do(func() {
		nodeBinary.bin, nodeBinary.err = buildNode()
	})
	return nodeBinary.bin, nodeBinary.err
}

// buildNode builds plinth-node into a new directory, which nodeBinary
// records for removal even when the build fails.
func buildNode() (string, error) {
	dir, err := os.MkdirTemp("", "plinth-node-bin-")
	if err != nil {
		return "", fmt.Errorf("building plinth-node: %w", err)
	}
	nodeBinary.dir = dir
	repo, err := launch.RepoRoot(".")
	if err != nil {
		return "", fmt.Errorf("building plinth-node: %w", err)
	}
	bin := filepath.Join(dir, "plinth-node")
	cmd := exec.Command("go", "build", "-o", bin, "./node/cmd/plinth-node")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building plinth-node: %w\n%s", err, out)
	}
	return bin, nil
}

// removeNodeBinary removes what PlinthNodeBinary built, if it built.
func removeNodeBinary() {
	if nodeBinary.dir != "" {
		_ = os.RemoveAll(nodeBinary.dir)
	}
}

// NodeProcess runs plinth-node as a separate process that a test can kill
// (or another program beside it, such as a benchmark's baseline).
type NodeProcess struct {
	T     testing.TB
	Bin   string
	Args  []string
	Extra func() []string // more arguments, per start
	Env   []string        // added to the test's environment
	Log   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts plinth-node, failing the test if it cannot.
func (p *NodeProcess) Start() {
	p.T.Helper()
	if err := p.StartErr(); err != nil {
		p.T.Fatal(err)
	}
}

// Run starts plinth-node for the rest of the test: it is stopped
// (SIGTERM) when the test ends, and the tail of its log is logged, with
// its node's name, if the test failed.
func (p *NodeProcess) Run() {
	p.T.Helper()
	p.Start()
	p.T.Cleanup(func() {
		p.Kill(syscall.SIGTERM)
		if p.T.Failed() {
			node := "?"
			for _, a := range p.Args {
				if v, ok := strings.CutPrefix(a, "--node-name="); ok {
					node = v
				}
			}
			p.T.Logf("plinth-node %s log (tail):\n%s", node, p.LogTail())
		}
	})
}

// StartErr starts plinth-node (for callers without a *testing.T).
func (p *NodeProcess) StartErr() error {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The newline ends a line the previous process was killed in the
	// middle of.
	if _, err := fmt.Fprintf(logf, "\n%s\n", StartLine); err != nil {
		return fmt.Errorf("writing to %s: %w", p.Log, err)
	}
	args := p.Args
	if p.Extra != nil {
		args = append(slices.Clone(args), p.Extra()...)
	}
	cmd := exec.Command(p.Bin, args...)
	if p.Env != nil {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := tether.Start(cmd)
	if err != nil {
		return fmt.Errorf("starting plinth-node: %w", err)
	}
	done := make(chan struct{})
	go func() { <-exited; close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// Pid is the process ID of the running plinth-node.
func (p *NodeProcess) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Running reports whether the process last started has not exited.
func (p *NodeProcess) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Kill sends sig and waits for the process to be gone.
func (p *NodeProcess) Kill(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return // reaped: its group ID may belong to another process by now
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// StartLine is the line the log has before each start's output.
const StartLine = "=== controllertest: plinth-node started ==="

// Incarnations is the log split into what each start wrote, first to
// last, so that a test can tell what a process did before it was killed.
func (p *NodeProcess) Incarnations() ([]string, error) {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(string(b), StartLine+"\n")
	return parts[1:], nil // before the first start: nothing
}

// LogTail is the end of the process's log, for a failure report.
func (p *NodeProcess) LogTail() string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(string(b), "\n")
	return strings.Join(lines[max(0, len(lines)-60):], "\n")
}

// NodeProcess returns a plinth-node process (not started) serving the
// env's node and data directory, with the restricted identity a node
// really runs with (its own, system:plinth-node:<node>), and args added.
// Unenforced capacity is allowed where the env's data directory has no
// quotas (the host); where it has (the kernel-test VM) the node must find
// them itself.
func (e *Env) NodeProcess(t *testing.T, args ...string) *NodeProcess {
	t.Helper()
	bin, err := PlinthNodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	cp := e.CP
	if cp == nil {
		cp = ControlPlane(t)
	}
	kubeconfig, err := cp.NodeAgentKubeconfig(e.Node)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{
		"--root=" + filepath.Join(t.TempDir(), "node"),
		"--data-dir=" + e.Dir,
		"--node-name=" + e.Node,
		"--kubeconfig=" + kubeconfig,
	}
	if !e.Vols.CapacityEnforced() {
		base = append(base, "--allow-unenforced-capacity")
	}
	return &NodeProcess{T: t, Bin: bin, Log: filepath.Join(t.TempDir(), "plinth-node.log"), Args: append(base, args...)}
}

// EveryOtherStart is a NodeProcess.Extra that gives every second start a
// client budget of qps and burst, so tight that API writes wait. Crash
// tests use it to widen the windows between an operation's steps, so that
// kills land inside them, while the other starts run fast and kills land
// in the volume work.
func EveryOtherStart(qps, burst int) func() []string {
	starts := 0
	return func() []string {
		starts++
		if TightStart(starts) {
			return []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst)}
		}
		return nil
	}
}

// NodeCalls returns the API calls the plinth-node processes of node made,
// from the control plane's audit log, oldest first: the calls the API
// server authenticated as that node's own identity (NodeProcess runs each
// node with one), which no other node's process can make.
func NodeCalls(t testing.TB, node string) []launch.AuditEvent {
	t.Helper()
	events, err := ControlPlane(t).AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	user := clusterobjects.NodeAgentUser(node)
	var calls []launch.AuditEvent
	for _, e := range events {
		if e.User.Username == user {
			calls = append(calls, e)
		}
	}
	return calls
}

// TightStart reports whether start n (the first is 1) of a NodeProcess
// whose Extra is EveryOtherStart has the tight budget, so that a killer
// can treat those starts differently.
func TightStart(n int) bool { return n%2 == 0 }

// LogSize is the current length of the process's log: where the lines of
// a start that follows begin.
func (p *NodeProcess) LogSize() int64 {
	st, err := os.Stat(p.Log)
	if err != nil {
		return 0
	}
	return st.Size()
}

// WaitLogged waits until the log, from offset off, has a line matching re,
// and reports whether it came within timeout (or stop was closed first,
// which also counts as true: the caller is ending).
//
// The crash tests use it under TCG, where a start takes longer than the
// random life a kill gives it: a life is counted from the moment the
// controller under test runs.
func (p *NodeProcess) WaitLogged(re *regexp.Regexp, off int64, timeout time.Duration, stop <-chan struct{}) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if f, err := os.Open(p.Log); err == nil {
			b, _ := io.ReadAll(io.NewSectionReader(f, off, 1<<30))
			f.Close()
			if re.Match(b) {
				return true
			}
		}
		select {
		case <-stop:
			return true
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}
