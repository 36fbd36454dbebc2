package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes"
	"source.plinth.dev/test/controllertest"
)

// roleEnv makes the test binary play a part in a child process: the
// plinth-node command itself (so the smoke test runs exactly main's code
// path, also under Bazel where no Go toolchain is at hand), or one of the
// init helpers that need a process of their own.
const roleEnv = "PLINTH_NODE_TEST_ROLE"

func TestMain(m *testing.M) {
	switch role := os.Getenv(roleEnv); role {
	case "":
		// The control plane of the tests that need one goes with them.
		code := controllertest.Tests(m).Run()
		if theBoot.workDir != "" {
			os.RemoveAll(theBoot.workDir)
		}
		os.Exit(code)
	case "plinth-node":
		os.Exit(run(os.Args[1:]))
	default:
		os.Exit(runHelper(role))
	}
}

// node is a plinth-node process started by a test.
type node struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string
	done chan error
}

func startNode(t *testing.T, args ...string) *node {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), roleEnv+"=plinth-node")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{cmd: cmd, line: make(chan string, 1024), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			n.mu.Lock()
			n.out.WriteString(sc.Text() + "\n")
			n.mu.Unlock()
			select {
			case n.line <- sc.Text():
			default:
			}
		}
		n.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-n.done
		}
	})
	return n
}

func (n *node) output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.String()
}

// waitLine waits until the output so far contains s, whether it was
// logged before the call or after: callers waiting for several lines may
// ask in any order. The limit only catches a hang; it is no performance
// goal.
func (n *node) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if strings.Contains(n.output(), s) {
			return
		}
		select {
		case <-n.line: // something new was logged; look again
		case err := <-n.done:
			n.done <- err
			if strings.Contains(n.output(), s) {
				return
			}
			t.Fatalf("plinth-node exited (%v) before logging %q:\n%s", err, s, n.output())
		case <-timeout:
			t.Fatalf("no log line %q within 30s:\n%s", s, n.output())
		}
	}
}

func (n *node) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-n.done:
		return err
	case <-time.After(40 * time.Second):
		t.Fatalf("plinth-node did not exit within 40s:\n%s", n.output())
		return nil
	}
}

func TestHostedSmoke(t *testing.T) {
	root := filepath.Join(t.TempDir(), "node")
	n := startNode(t, "--root", root, "--node-name", "smoke-1")
	n.waitLine(t, "node smoke-1 is up")

	for _, p := range []string{"data/volumes", "data/state/projects", "ephemeral/csi/publications", "kubelet/plugins", "kubelet/plugins_registry", "kubelet/pods"} {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "data/volumes")); err == nil && fi.Mode().Perm() != 0o700 {
		t.Errorf("data/volumes has mode %v, want 0700", fi.Mode())
	}
	pidFile := filepath.Join(root, "ephemeral/plinth-node.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(n.cmd.Process.Pid) {
		t.Errorf("PID file holds %q (%v), want %d", b, err, n.cmd.Process.Pid)
	}

	// A second node on the same tree refuses to start and leaves the
	// first alone.
	second := startNode(t, "--root", root, "--node-name", "smoke-2")
	if err := second.wait(t); err == nil || !strings.Contains(second.output(), "another plinth-node is running") {
		t.Errorf("second instance: %v\n%s", err, second.output())
	}

	if err := n.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.wait(t); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, n.output())
	}
	if !strings.Contains(n.output(), "stopped cleanly") {
		t.Errorf("no clean stop logged:\n%s", n.output())
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("PID file left after exit: %v", err)
	}
}

func TestHostedSubtreeFlags(t *testing.T) {
	base := t.TempDir()
	root, kubelet, data := filepath.Join(base, "root"), filepath.Join(base, "kubelet"), filepath.Join(base, "data")
	n := startNode(t, "--root", root, "--kubelet-dir", kubelet, "--data-dir", data, "--node-name", "sub",
		"--allow-unenforced-capacity", "-v", "1")
	n.waitLine(t, "node sub is up")
	for _, p := range []string{filepath.Join(kubelet, "plugins_registry"), filepath.Join(data, "volumes"), filepath.Join(root, "ephemeral")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(root, "kubelet"), filepath.Join(root, "data")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s created although its subtree was placed elsewhere", p)
		}
	}
	n.cmd.Process.Signal(unix.SIGINT)
	if err := n.wait(t); err != nil {
		t.Errorf("exit after SIGINT: %v", err)
	}
}

func TestCommandLineErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--root is required"},
		{[]string{"--root", "/x", "extra"}, 2, "unexpected arguments"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--help"}, 0, "-kubelet-dir string"},
		// The subcommand is dispatched before the node's flags are parsed.
		{[]string{"csi-serve"}, 1, "plinth-node csi-serve:"},
		{[]string{"csi-serve", "--help"}, 0, "Usage: plinth-node csi-serve"},
		{[]string{"admission-serve"}, 1, "--tls-cert-file and --tls-key-file, or --certificate-secret, are required"},
		{[]string{"admission-serve", "--help"}, 0, "Usage: plinth-node admission-serve"},
		{[]string{"admission-serve", "--certificate-secret", "plinth-system"}, 1, "--certificate-secret takes NAMESPACE/NAME"},
		{[]string{"admission-serve", "--certificate-secret", "a/b", "--tls-cert-file", "c"}, 1, "exclude each other"},
	} {
		cmd := exec.Command(os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), roleEnv+"=plinth-node")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("plinth-node %q: exit %d, output:\n%s\nwant exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var buf bytes.Buffer
	if _, err := parseOptions([]string{"--help"}, &buf); err == nil {
		t.Fatal("--help did not return ErrHelp")
	}
	// Every declared flag, including ones added later, is in the help
	// with a description of more than a word or two; the test-only ones
	// are described too, but left out of the help.
	n, testOnly := 0, 0
	(&options{}).flagSet(io.Discard).VisitAll(func(f *flag.Flag) {
		n++
		inHelp := strings.Contains(buf.String(), "  -"+f.Name)
		if strings.HasPrefix(f.Name, testOnlyFlagPrefix) {
			testOnly++
			if inHelp {
				t.Errorf("test-only flag -%s is shown in --help", f.Name)
			}
			inHelp = true
		}
		if !inHelp || len(f.Usage) < 20 {
			t.Errorf("flag -%s is not documented in --help (usage %q)", f.Name, f.Usage)
		}
	})
	if n < 12 || testOnly < 1 {
		t.Errorf("only %d flags declared, %d of them test-only", n, testOnly)
	}
}

func TestOptions(t *testing.T) {
	o, err := parseOptions([]string{"--root", "rel/root", "--kubelet-dir", "/var/lib/kubelet"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := os.Hostname()
	if o.node.NodeName != strings.ToLower(h) {
		t.Errorf("default node name %q, want lower-cased host name %q", o.node.NodeName, h)
	}
	tree, err := o.tree()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if got, want := tree.Data.Volumes.FullPath(), filepath.Join(wd, "rel/root/data/volumes"); got != want {
		t.Errorf("relative root: volumes at %q, want %q", got, want)
	}
	if got := tree.Kubelet.Pods.FullPath(); got != "/var/lib/kubelet/pods" {
		t.Errorf("kubelet pods at %q", got)
	}
	if o.dataMount() != nil {
		t.Error("data mount without --data-device")
	}
	o, err = parseOptions([]string{"--root", "/", "--data-device", "/dev/vdb"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if m := o.dataMount(); m == nil || m.Source != "/dev/vdb" || m.FSType != "xfs" || m.Options != "prjquota" {
		t.Errorf("data mount %+v", m)
	}
	if o.node.NodeShare.Reserve != volume.DefaultShareReserve || len(o.node.NodeShare.Dirs) != 0 {
		t.Errorf("node share %+v, want the default reserve and no directories (a hosted node does not own the kubelet's layout)", o.node.NodeShare)
	}
	o, err = parseOptions([]string{"--root", "/x", "--node-share-reserve", "512Mi"}, io.Discard)
	if err != nil || o.node.NodeShare.Reserve != 512<<20 {
		t.Errorf("--node-share-reserve 512Mi: %v, %+v", err, o)
	}
	for _, bad := range [][]string{
		{"--root", "/x", "--node-share-reserve", "-1Gi"},
		{"--root", "/x", "--node-share-reserve", "lots"},
		{"--root", "/x", "-v", "-1"},
		{"--root", "/x", "--node-name", "(none)"},
		{"--root", "/x", "--node-name", "Upper"},
		{"--root", "/x", "--node-name", "a..b"},
		{"--root", "/x", "--data-device", "/dev/x", "--data-fstype", ""},
		{"--root", "/x", "--in-cluster", "--kubeconfig", "/k"},
	} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestInClusterRunsKubernetesService: deploy/'s DaemonSet passes
// --in-cluster and no kubeconfig; without the Kubernetes service it would
// run a node tree that provisions nothing.
func TestInClusterRunsKubernetesService(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--in-cluster"}, true},
		{[]string{"--kubeconfig", "/k"}, true},
		{nil, false},
	} {
		o, err := parseOptions(append([]string{"--root", t.TempDir()}, c.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := o.tree()
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := services(o, tree, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, s := range svcs {
			got = got || s.Name == kubernetes.ServiceName
		}
		if got != c.want {
			t.Errorf("%q: Kubernetes service started %v, want %v", c.args, got, c.want)
		}
	}
}

func TestCSIServeOptions(t *testing.T) {
	// The flags csi-serve shares with the node (commonOptions) reach it.
	o, err := parseCSIServeOptions([]string{"--endpoint", "unix:///csi.sock", "--data-dir", "/d", "--kubelet-dir", "/k",
		"--ephemeral-dir", "/e", "--node-name", "n1", "--allow-unenforced-capacity", "-v", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if o.dataDir != "/d" || o.kubeletDir != "/k" || o.ephemeralDir != "/e" || o.node.NodeName != "n1" || !o.node.AllowUnenforcedCapacity || o.verbosity != 2 {
		t.Errorf("options %+v", o.commonOptions)
	}
	o, err = parseCSIServeOptions([]string{"--endpoint", "unix:///csi.sock", "--data-dir", "/d", "--kubelet-dir", "/k"})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := os.Hostname(); o.node.NodeName != strings.ToLower(h) || !strings.HasPrefix(o.ephemeralDir, "/run/plinth/csi-serve-") {
		t.Errorf("defaults: node name %q, ephemeral dir %q", o.node.NodeName, o.ephemeralDir)
	}
	for _, bad := range [][]string{
		{"--data-dir", "/d", "--kubelet-dir", "/k"},
		{"--endpoint", "unix:///csi.sock", "--kubelet-dir", "/k"},
		{"--endpoint", "unix:///csi.sock", "--data-dir", "/d"},
		{"--endpoint", "unix:///csi.sock", "--data-dir", "/d", "--kubelet-dir", "/k", "--node-name", "Upper"},
	} {
		if _, err := parseCSIServeOptions(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Must is a tiny helper for subprocess roles.
func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
}

// TestHostedAsPID1: in a container plinth-node is PID 1 with the
// DaemonSet's flags and must run hosted, not as the node's init; the kernel
// starts init with no --root.
func TestHostedAsPID1(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--config-device=/dev/vdb"}, false},
		{[]string{"--in-cluster", "--root=/var/lib/plinth"}, true},
		{[]string{"-root", "/x"}, true},
		{[]string{"--rootfs=/x"}, false},
		{[]string{"csi-serve", "--data-dir=/d"}, true},
	} {
		if got := hosted(c.args); got != c.want {
			t.Errorf("hosted(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestOnlyTheDataDirectoryIsResolved: a data directory reached through a
// symbolic link is placed at its resolved path (the volume layer compares
// its paths with the kernel's); a linked kubelet directory keeps the form
// it was given, which is the form of the target paths the kubelet sends.
// Both commands agree.
func TestOnlyTheDataDirectoryIsResolved(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"data", "kubelet"} {
		if err := os.MkdirAll(filepath.Join(base, "disk", d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(base, "disk", d), filepath.Join(base, d)); err != nil {
			t.Fatal(err)
		}
	}
	data, kubelet := filepath.Join(base, "data"), filepath.Join(base, "kubelet")
	o, err := parseOptions([]string{"--root", filepath.Join(base, "root"), "--data-dir", data, "--kubelet-dir", kubelet}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := o.tree()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tree.Data.FullPath(), filepath.Join(base, "disk", "data"); got != want {
		t.Errorf("node: data directory at %q, want the resolved %q", got, want)
	}
	if got := tree.Kubelet.FullPath(); got != kubelet {
		t.Errorf("node: kubelet directory at %q, want %q as given", got, kubelet)
	}
	c, err := parseCSIServeOptions([]string{"--endpoint", "unix:///csi.sock", "--data-dir", data, "--kubelet-dir", kubelet, "--node-name", "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.dataDir != filepath.Join(base, "disk", "data") || c.kubeletDir != kubelet {
		t.Errorf("csi-serve: data directory %q, kubelet directory %q; want %q and %q", c.dataDir, c.kubeletDir, filepath.Join(base, "disk", "data"), kubelet)
	}
}
