package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/mountinfo"
	"source.plinth.dev/pkg/mountinfo/mounttest"
)

// The init's code paths are tested in child processes that get the
// relevant parts of being PID 1 without being it: a private mount
// namespace for the early mounts, /dev/null standard descriptors for the
// console, the child-subreaper bit for reaping orphans.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("needs root")
	}
}

func helperCmd(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	return cmd
}

func runHelper(role string) int {
	log := logtree.New(logtree.WithSink(os.Stderr)).LeveledFor("init")
	switch role {
	case "mount-early":
		prefix := os.Getenv("PREFIX")
		// Our mounts must stay in this namespace, which dies with us.
		must(unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
		for range 2 { // the second pass must find everything mounted
			must(mountEarly(prefix, earlyMounts(), log))
		}
		mounts, err := mountinfo.Read()
		must(err)
		for _, m := range mountinfo.Under(mounts, prefix) {
			fmt.Printf("%s %s\n", strings.TrimPrefix(m.MountPoint, prefix), m.FSType)
		}
		_, err = os.Stat(filepath.Join(prefix, "dev/null"))
		must(err)
		return 0
	case "unmount-all":
		// Everything but / and the early mounts goes, so the namespace
		// must be private: unmounts must not propagate to the host.
		must(unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
		target := os.Getenv("TARGET")
		must(unix.Mount("tmpfs", target, "tmpfs", 0, ""))
		unmountAll(log)
		mounts, err := mountinfo.Read()
		must(err)
		fmt.Printf("%d", len(mountinfo.At(mounts, target)))
		return 0
	case "console":
		must(attachConsole(os.Getenv("CONSOLE")))
		fmt.Fprint(os.Stdout, "to-stdout")
		fmt.Fprint(os.Stderr, "to-console")
		return 0
	case "await-term":
		return awaitTermHelper()
	case "supervise":
		// Stand in for PID 1: orphans of our descendants come to us.
		must(unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
		sigs := make(chan os.Signal, 16)
		signalNotify(sigs)
		st, shutdown, err := superviseNode(log, "/bin/sh", []string{"-c", os.Getenv("SCRIPT")}, sigs)
		must(err)
		// Every orphan must have been reaped: no children are left.
		var ws unix.WaitStatus
		_, werr := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		settings, _ := parseBootSettings(nil)
		d := decideHalt(st, shutdown, nil, settings)
		fmt.Printf("exited=%v status=%d shutdown=%v leftover=%v halt=%#x\n", st.Exited(), st.ExitStatus(), shutdown, !errors.Is(werr, unix.ECHILD), d.cmd)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 3
}

func TestMountEarly(t *testing.T) {
	requireRoot(t)
	prefix := t.TempDir()
	cmd := helperCmd("mount-early", "PREFIX="+prefix)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, exitStderr(err))
	}
	got := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		target, fstype, _ := strings.Cut(l, " ")
		got[target] = append(got[target], fstype)
	}
	for _, m := range earlyMounts() {
		switch fs := got[m.target]; {
		case len(fs) == 0 && m.optional:
			t.Logf("optional %s not mounted here", m.target)
		case len(fs) != 1 || fs[0] != m.fstype:
			t.Errorf("%s: mounted %q, want one %s (two passes must not stack mounts)", m.target, fs, m.fstype)
		}
	}
	// Nothing leaked into our namespace.
	if mounttest.Mentions(t, prefix) > 0 {
		t.Errorf("early mounts leaked out of the helper's namespace")
	}
}

// TestUnmountAllDecodesPaths checks that the halt path unmounts a mount
// whose path the mount table escapes (a space, a backslash).
func TestUnmountAllDecodesPaths(t *testing.T) {
	requireRoot(t)
	target := filepath.Join(t.TempDir(), `with space\and backslash`)
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := helperCmd("unmount-all", "TARGET="+target)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, exitStderr(err))
	}
	if string(out) != "0" {
		t.Errorf("%s mounts left at %q after unmountAll, want 0", out, target)
	}
	if mounttest.Mentions(t, target) > 0 {
		t.Errorf("the helper's mount leaked out of its namespace")
	}
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

func TestAttachConsole(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console")
	if err := os.WriteFile(console, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// exec gives the helper /dev/null as stdin and stderr, and a pipe as
	// stdout: only the /dev/null ones must move to the console.
	cmd := helperCmd("console", "CONSOLE="+console)
	var out strings.Builder
	cmd.Stdout = &out // Stdin and Stderr stay nil: /dev/null
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if out.String() != "to-stdout" {
		t.Errorf("stdout pipe got %q; a connected descriptor was moved", out.String())
	}
	b, _ := os.ReadFile(console)
	if string(b) != "to-console" {
		t.Errorf("console got %q, want the stderr output", b)
	}
}

func TestSuperviseNode(t *testing.T) {
	for _, c := range []struct {
		name, script string
		sigterm      bool
		want         string
	}{
		// An orphan (the subshell's sleep) ends while the node runs: it
		// must be reaped, and then the node's own failure reported.
		{"failure with orphan", "(sleep 0.1 &); sleep 0.5; exit 3", false,
			fmt.Sprintf("exited=true status=3 shutdown=false leftover=false halt=%#x", unix.LINUX_REBOOT_CMD_RESTART)},
		{"clean exit", "exit 0", false,
			fmt.Sprintf("exited=true status=0 shutdown=false leftover=false halt=%#x", unix.LINUX_REBOOT_CMD_POWER_OFF)},
		// SIGTERM to init reaches the node, which exits 0 on it.
		{"shutdown", "trap 'exit 0' TERM; echo ready >&2; while :; do sleep 0.05; done", true,
			fmt.Sprintf("exited=true status=0 shutdown=true leftover=false halt=%#x", unix.LINUX_REBOOT_CMD_POWER_OFF)},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := helperCmd("supervise", "SCRIPT="+c.script)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stderr)
			if c.sigterm {
				for sc.Scan() && sc.Text() != "ready" {
				}
				cmd.Process.Signal(unix.SIGTERM)
			}
			for sc.Scan() {
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("helper: %v", err)
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatal("helper hung")
			}
			if got := strings.TrimSpace(out.String()); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestDecideHalt(t *testing.T) {
	exit := func(code int) unix.WaitStatus { return unix.WaitStatus(code << 8) }
	killed := unix.WaitStatus(unix.SIGKILL)
	for _, c := range []struct {
		name      string
		st        unix.WaitStatus
		shutdown  bool
		err       error
		onFailure string
		cmd       int
		delay     time.Duration
	}{
		{"clean exit", exit(0), false, nil, "", unix.LINUX_REBOOT_CMD_POWER_OFF, 0},
		{"requested shutdown", exit(1), true, nil, "", unix.LINUX_REBOOT_CMD_POWER_OFF, 0},
		{"failure reboots", exit(1), false, nil, "", unix.LINUX_REBOOT_CMD_RESTART, failureHaltDelay},
		{"killed reboots", killed, false, nil, "reboot", unix.LINUX_REBOOT_CMD_RESTART, failureHaltDelay},
		{"failure powers off when asked", exit(2), false, nil, "poweroff", unix.LINUX_REBOOT_CMD_POWER_OFF, failureHaltDelay},
		{"start failure", 0, false, errors.New("no exe"), "", unix.LINUX_REBOOT_CMD_RESTART, failureHaltDelay},
	} {
		s, problems := parseBootSettings(map[string]string{"plinth.onfailure": c.onFailure})
		if len(problems) > 0 {
			t.Fatal(problems)
		}
		d := decideHalt(c.st, c.shutdown, c.err, s)
		if d.cmd != c.cmd || d.delay != c.delay || d.reason == "" {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
}

func TestParseBootSettings(t *testing.T) {
	s, problems := parseBootSettings(map[string]string{"plinth.haltdelay": "1500ms", "plinth.verbosity": "3", "plinth.hostname": "n1", "plinth.onfailure": "poweroff"})
	if len(problems) > 0 || s.failDelay != 1500*time.Millisecond || s.verbosity != 3 || s.hostname != "n1" || s.failCmd != unix.LINUX_REBOOT_CMD_POWER_OFF {
		t.Errorf("settings %+v, problems %q", s, problems)
	}
	// Bad values fall back to safe defaults, each with a complaint.
	s, problems = parseBootSettings(map[string]string{"plinth.haltdelay": "soon", "plinth.verbosity": "-1", "plinth.onfailure": "explode"})
	if len(problems) != 3 || s.failDelay != failureHaltDelay || s.verbosity != 0 || s.failCmd != unix.LINUX_REBOOT_CMD_RESTART {
		t.Errorf("settings %+v, problems %q", s, problems)
	}
}

func TestLoadModulesReportsFailures(t *testing.T) {
	// Only failures can be tested on a host (loading would change its
	// kernel); the boot test loads real modules.
	var buf strings.Builder
	log := logtree.New(logtree.WithSink(&buf)).LeveledFor("init")
	list := filepath.Join(t.TempDir(), "modules.list")
	if err := os.WriteFile(list, []byte("# comment\n\n/nonexistent/xfs.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	loadModules(list, log)
	loadModules(filepath.Join(t.TempDir(), "absent.list"), log)
	if got := buf.String(); strings.Count(got, "loading module") != 1 || !strings.Contains(got, "/nonexistent/xfs.ko") {
		t.Errorf("log:\n%s", got)
	}
}

func TestParseCmdline(t *testing.T) {
	got := parseCmdline(`BOOT_IMAGE=/vmlinuz console=ttyS0 plinth.data=/dev/vdb quiet plinth.dataopts="prjquota,noatime" plinth.hostname=node-1` + "\n")
	want := map[string]string{
		"BOOT_IMAGE": "/vmlinuz", "console": "ttyS0", "plinth.data": "/dev/vdb", "quiet": "",
		"plinth.dataopts": "prjquota,noatime", "plinth.hostname": "node-1",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	args := childArgs(got, []string{"-v", "2"})
	wantArgs := []string{"--root", "/", "--ephemeral-dir", bootEphemeralDir, "--kubelet-dir", bootKubeletDir, "--data-device", "/dev/vdb",
		"--data-mount-options", "prjquota,noatime", "--node-name", "node-1", "-v", "2"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("child args %q\nwant %q", args, wantArgs)
	}
	// The child arguments are valid plinth-node flags.
	if _, err := parseOptions(args, nil); err != nil {
		t.Errorf("child args do not parse: %v", err)
	}
	if n, err := strconv.Atoi(got["plinth.verbosity"]); err == nil {
		t.Errorf("absent verbosity parsed as %d", n)
	}
	// plinth.verbosity reaches the node process; -v after "--" still
	// overrides it.
	args = childArgs(parseCmdline("plinth.data=/dev/vdb plinth.verbosity=3"), []string{"-v", "1"})
	o, err := parseOptions(args, nil)
	if err != nil || !slices.Contains(args, "3") {
		t.Fatalf("child args %q with plinth.verbosity=3: %v", args, err)
	}
	if o.verbosity != 1 {
		t.Errorf("child verbosity %d with plinth.verbosity=3 and -v 1 after --, want 1", o.verbosity)
	}
	if o, _ := parseOptions(childArgs(parseCmdline("plinth.data=/dev/vdb plinth.verbosity=3"), nil), nil); o == nil || o.verbosity != 3 {
		t.Errorf("child options %+v with plinth.verbosity=3, want verbosity 3", o)
	}
	// A value that is not a level must not keep the node from starting.
	if _, err := parseOptions(childArgs(parseCmdline("plinth.data=/dev/vdb plinth.verbosity=loud"), nil), nil); err != nil {
		t.Errorf("child args with plinth.verbosity=loud do not parse: %v", err)
	}
}

// TestChildArgsWithConfigDisk: plinth.config= passes the disk on and moves
// the kubelet's root onto the data partition; no host name is needed (the
// disk names the node).
func TestChildArgsWithConfigDisk(t *testing.T) {
	args := childArgs(parseCmdline("plinth.data=/dev/vda plinth.config=/dev/vdb"), nil)
	wantArgs := []string{"--root", "/", "--ephemeral-dir", bootEphemeralDir, "--kubelet-dir", bootKubeletDirOnData,
		"--config-device", "/dev/vdb", "--data-device", "/dev/vda"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("child args %q\nwant %q", args, wantArgs)
	}
	o, err := parseOptions(args, nil)
	if err != nil {
		t.Fatalf("child args do not parse: %v", err)
	}
	if o.node.NodeName != "" {
		t.Errorf("node name %q chosen before the configuration disk is read", o.node.NodeName)
	}
	// plinth.kubeletdir= still wins.
	args = childArgs(parseCmdline("plinth.config=/dev/vdb plinth.kubeletdir=/data/k"), nil)
	if o, err := parseOptions(args, nil); err != nil || o.kubeletDir != "/data/k" {
		t.Errorf("plinth.kubeletdir with plinth.config: %v, %+v", err, o)
	}
}

// TestLinkKubeletDir: a node whose kubelet root is on the data partition
// gets /var/lib/kubelet as a link to it (the default root needs none), the
// effective --kubelet-dir is the last one given, and an existing
// /var/lib/kubelet is kept.
func TestLinkKubeletDir(t *testing.T) {
	args := childArgs(parseCmdline("plinth.data=/dev/vda plinth.config=/dev/vdb"), nil)
	if got := kubeletDirOf(args); got != bootKubeletDirOnData {
		t.Fatalf("kubelet dir of %q = %q, want %q", args, got, bootKubeletDirOnData)
	}
	if got := kubeletDirOf(append(args, "--kubelet-dir=/elsewhere")); got != "/elsewhere" {
		t.Errorf("a later --kubelet-dir= gives %q, want /elsewhere", got)
	}

	root := t.TempDir()
	if err := linkKubeletDir(root, bootKubeletDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, bootKubeletDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the default kubelet root was linked or made (%v)", err)
	}
	if err := linkKubeletDir(root, bootKubeletDirOnData); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(root, bootKubeletDir)); err != nil || got != bootKubeletDirOnData {
		t.Fatalf("%s -> %q (%v), want %s", bootKubeletDir, got, err, bootKubeletDirOnData)
	}
	// A second boot's call, or one with another root, keeps what is there.
	if err := linkKubeletDir(root, "/other"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(filepath.Join(root, bootKubeletDir)); got != bootKubeletDirOnData {
		t.Errorf("an existing link was replaced: now -> %q", got)
	}
}
