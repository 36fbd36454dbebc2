package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/imagelayout"
	"source.plinth.dev/pkg/kmod"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/mountinfo"
)

// The init is deliberately small. PID 1 only mounts what every process
// needs, reaps orphans and decides what happens when the node process ends;
// the node itself (supervisor tree, mounts of the data partition, services)
// runs as an ordinary child. That split buys three things: a crash anywhere
// in the node is an exit status for init to act on rather than a kernel
// panic; init's reaping loop (wait4 on any child) can never steal the exit
// status of a process the node started and waits for itself; and the node
// code runs the same way here as hosted.

// Where the booted node keeps its ephemeral tree: /run is tmpfs, so the
// state ends with the boot, as its declaration says it must.
const bootEphemeralDir = "/run/plinth"

// bootKubeletDir is the kubelet's own default --root-dir, so a kubelet
// configured with defaults and plinth-node agree where plugins live. The
// node image must make it writable (e.g. a bind mount from the data
// partition); plinth.kubeletdir= on the kernel command line changes it.
const bootKubeletDir = "/var/lib/kubelet"

// bootKubeletDirOnData is the kubelet's root on a node that runs its own
// kubelet (plinth.config= given): on the data partition, mounted at
// <root>/data, because pods need disk rather than the initramfs's RAM
// (node/kubernetes/kubelet says more).
const bootKubeletDirOnData = "/data/kubelet"

// defaultPath is the PATH of the node process when the kernel gave none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Delays before init reboots or powers off after its node process ended:
// long enough to read the console or copy the log, short enough that a
// crash-looping machine still gets its turn to recover. killGrace is the
// longest init then waits for processes to end on SIGTERM; it waits only
// while one that can still act on the signal is left (awaitTerm).
const (
	failureHaltDelay = 10 * time.Second
	killGrace        = 5 * time.Second
)

// earlyMount is a filesystem init mounts before starting the node.
type earlyMount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	// optional mounts may fail (an older kernel without cgroup2, a
	// container without devpts); the failure is logged.
	optional bool
}

// earlyMounts lists what init mounts, in order (parents before children).
func earlyMounts() []earlyMount {
	const nosuid, nodev, noexec = unix.MS_NOSUID, unix.MS_NODEV, unix.MS_NOEXEC
	return []earlyMount{
		{source: "proc", target: "/proc", fstype: "proc", flags: nosuid | nodev | noexec},
		{source: "sysfs", target: "/sys", fstype: "sysfs", flags: nosuid | nodev | noexec},
		{source: "devtmpfs", target: "/dev", fstype: "devtmpfs", flags: nosuid, data: "mode=0755"},
		{source: "devpts", target: "/dev/pts", fstype: "devpts", flags: nosuid | noexec, data: "mode=0620,ptmxmode=0666", optional: true},
		{source: "tmpfs", target: "/dev/shm", fstype: "tmpfs", flags: nosuid | nodev, data: "mode=1777", optional: true},
		{source: "tmpfs", target: "/run", fstype: "tmpfs", flags: nosuid | nodev, data: "mode=0755"},
		{source: "cgroup2", target: "/sys/fs/cgroup", fstype: "cgroup2", flags: nosuid | nodev | noexec, data: "nsdelegate", optional: true},
	}
}

// mountEarly mounts mounts below prefix ("" on a real boot; tests use a
// directory in a private mount namespace), skipping what is mounted already
// (an initramfs may have done part of the work).
func mountEarly(prefix string, mounts []earlyMount, log logtree.LeveledLogger) error {
	for _, m := range mounts {
		target := filepath.Join("/", prefix, m.target)
		// Before /proc is mounted the mount table cannot be read; then
		// nothing counts as mounted, which is right for /proc itself.
		if mounted, err := core.IsMountPoint(target); err == nil && mounted {
			continue
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			if m.optional {
				log.Warningf("skipping %s: %v", target, err)
				continue
			}
			return fmt.Errorf("creating mount point %s: %w", target, err)
		}
		if err := unix.Mount(m.source, target, m.fstype, m.flags, m.data); err != nil {
			if m.optional {
				log.Warningf("mounting %s (%s) failed, continuing without it: %v", target, m.fstype, err)
				continue
			}
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, target, err)
		}
	}
	return nil
}

// attachConsole points each standard descriptor (0, 1, 2) that leads
// nowhere at console. The kernel opens /dev/console for init only if the
// root filesystem has one; if not, the Go runtime starts us with the closed
// descriptors opened on /dev/null (and aborts if that is missing too, so
// the image must ship both), and init and the node would log into the
// void. Descriptors the kernel did connect are left alone.
func attachConsole(console string) error {
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		return fmt.Errorf("finding /dev/null: %w", err)
	}
	for fd := 0; fd <= 2; fd++ {
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		if err == nil && !(st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == null.Rdev) {
			continue
		}
		cfd, err := unix.Open(console, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening console %s: %w", console, err)
		}
		// Dup3 without O_CLOEXEC: the node process inherits the console.
		err = unix.Dup3(cfd, fd, 0)
		unix.Close(cfd)
		if err != nil {
			return fmt.Errorf("attaching console to descriptor %d: %w", fd, err)
		}
	}
	return nil
}

// parseCmdline splits a kernel command line into key=value settings; words
// without "=" map to "". Double quotes group words, as the kernel does.
func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	var word strings.Builder
	inQuote := false
	flush := func() {
		if word.Len() == 0 {
			return
		}
		k, v, _ := strings.Cut(word.String(), "=")
		out[k] = v
		word.Reset()
	}
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
		case (r == ' ' || r == '\t' || r == '\n') && !inQuote:
			flush()
		default:
			word.WriteRune(r)
		}
	}
	flush()
	return out
}

// childArgs builds the node process's arguments from the kernel command
// line. initArgs (what the kernel passed to init: words after "--") come
// last, so they override.
func childArgs(cmdline map[string]string, initArgs []string) []string {
	kubeletDir := bootKubeletDir
	if cmdline["plinth.config"] != "" {
		kubeletDir = bootKubeletDirOnData
	}
	args := []string{"--root", "/", "--ephemeral-dir", bootEphemeralDir, "--kubelet-dir", kubeletDir}
	for _, s := range []struct{ key, flag string }{
		{"plinth.kubeletdir", "--kubelet-dir"},
		{"plinth.config", "--config-device"},
		{"plinth.data", "--data-device"},
		{"plinth.datafs", "--data-fstype"},
		{"plinth.dataopts", "--data-mount-options"},
		{"plinth.hostname", "--node-name"},
	} {
		if v, ok := cmdline[s.key]; ok && v != "" {
			args = append(args, s.flag, v)
		}
	}
	// init logs at this level too; the node process, which does the
	// work, is what it is for. A value that is not a level is left out
	// (parseBootSettings warns of it), so that the node still starts.
	if v := cmdline["plinth.verbosity"]; v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			args = append(args, "-v", v)
		}
	}
	return append(args, initArgs...)
}

// kubeletDirOf is the --kubelet-dir the node process gets from args (the
// last one, as the flag package reads them).
func kubeletDirOf(args []string) string {
	dir := ""
	for i, a := range args {
		if a == "--kubelet-dir" && i+1 < len(args) {
			dir = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--kubelet-dir="); ok {
			dir = v
		}
	}
	return dir
}

// linkKubeletDir makes bootKubeletDir below prefix a symlink to the
// kubelet's root when that is elsewhere (on the data partition), so that
// what assumes the kubelet's default root finds the kubelet's pods there:
// node agents, and Kubernetes' own e2e specs, which list a pod's volume
// directories under a hard-coded /var/lib/kubelet from the host's mount
// namespace. Nothing the node runs uses the link. An existing
// bootKubeletDir is left alone.
func linkKubeletDir(prefix, kubeletDir string) error {
	if kubeletDir == "" || filepath.Clean(kubeletDir) == bootKubeletDir {
		return nil
	}
	link := filepath.Join("/", prefix, bootKubeletDir)
	if _, err := os.Lstat(link); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("linking %s to the kubelet's root: %w", bootKubeletDir, err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("linking %s to the kubelet's root: %w", bootKubeletDir, err)
	}
	if err := os.Symlink(kubeletDir, link); err != nil {
		return fmt.Errorf("linking %s to the kubelet's root: %w", bootKubeletDir, err)
	}
	return nil
}

// superviseNode starts the node process and reaps every child of this
// process (init's own and reparented orphans) until the node process has
// ended. A SIGTERM, SIGINT (Ctrl-Alt-Del) or SIGPWR is passed on to the node
// as SIGTERM and turns its end into a requested shutdown.
func superviseNode(log logtree.LeveledLogger, exe string, args []string, sigs <-chan os.Signal) (ws unix.WaitStatus, shutdown bool, err error) {
	p, err := os.StartProcess(exe, append([]string{"plinth-node"}, args...), &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Env:   os.Environ(),
	})
	if err != nil {
		return 0, false, fmt.Errorf("starting node process: %w", err)
	}
	defer p.Release()
	log.Infof("node process %d started: %s", p.Pid, strings.Join(args, " "))
	for {
		for {
			var st unix.WaitStatus
			pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if pid == p.Pid {
				return st, shutdown, nil
			}
			log.V(1).Infof("reaped orphan %d (%s)", pid, describeStatus(st))
		}
		switch sig := <-sigs; sig {
		case unix.SIGCHLD:
		default:
			log.Infof("received %v: stopping the node", sig)
			shutdown = true
			// The process may have just ended; its end is reaped above.
			_ = p.Signal(unix.SIGTERM)
		}
	}
}

// signalNotify routes the signals init acts on to sigs.
func signalNotify(sigs chan<- os.Signal) {
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT, unix.SIGPWR)
}

func describeStatus(st unix.WaitStatus) string {
	switch {
	case st.Exited():
		return fmt.Sprintf("exit status %d", st.ExitStatus())
	case st.Signaled():
		return fmt.Sprintf("killed by %v", st.Signal())
	}
	return fmt.Sprintf("wait status %#x", uint32(st))
}

// haltDecision is what init does after the node process ended.
type haltDecision struct {
	cmd    int // unix.LINUX_REBOOT_CMD_*
	delay  time.Duration
	reason string
}

// bootSettings are init's own settings from the kernel command line.
type bootSettings struct {
	// failCmd is what a failed node leads to: reboot, or power off with
	// plinth.onfailure=poweroff (what a test VM wants).
	failCmd int
	// failDelay is how long init waits before acting on a failure
	// (plinth.haltdelay=DURATION).
	failDelay time.Duration
	verbosity int
	hostname  string
}

// parseBootSettings reads init's settings; bad values are reported and
// replaced by defaults, because init must boot whatever the command line.
func parseBootSettings(cmdline map[string]string) (bootSettings, []string) {
	s := bootSettings{failCmd: unix.LINUX_REBOOT_CMD_RESTART, failDelay: failureHaltDelay, hostname: cmdline["plinth.hostname"]}
	var problems []string
	switch v := cmdline["plinth.onfailure"]; v {
	case "", "reboot":
	case "poweroff":
		s.failCmd = unix.LINUX_REBOOT_CMD_POWER_OFF
	default:
		problems = append(problems, fmt.Sprintf("plinth.onfailure=%q is neither reboot nor poweroff; rebooting on failure", v))
	}
	if v, ok := cmdline["plinth.haltdelay"]; ok {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			s.failDelay = d
		} else {
			problems = append(problems, fmt.Sprintf("plinth.haltdelay=%q is not a duration; using %s", v, failureHaltDelay))
		}
	}
	if v, ok := cmdline["plinth.verbosity"]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			s.verbosity = n
		} else {
			problems = append(problems, fmt.Sprintf("plinth.verbosity=%q is not a level", v))
		}
	}
	return s, problems
}

// decideHalt: a requested shutdown, or a node that exited 0 on its own,
// powers off at once; a failure reboots (or powers off) after a delay.
func decideHalt(st unix.WaitStatus, shutdown bool, startErr error, s bootSettings) haltDecision {
	switch {
	case startErr != nil:
		return haltDecision{s.failCmd, s.failDelay, startErr.Error()}
	case shutdown:
		return haltDecision{unix.LINUX_REBOOT_CMD_POWER_OFF, 0, "shutdown requested; node process " + describeStatus(st)}
	case st.Exited() && st.ExitStatus() == 0:
		return haltDecision{unix.LINUX_REBOOT_CMD_POWER_OFF, 0, "node process exited cleanly"}
	}
	return haltDecision{s.failCmd, s.failDelay, "node process failed: " + describeStatus(st)}
}

// loadModules loads the kernel modules listed in list (a module list, see
// pkg/kmod). A node image whose kernel has the drivers built in has no
// list. Failures are logged, not fatal: what needs a missing module fails
// later with its own, more specific error (e.g. the data partition's mount).
func loadModules(list string, log logtree.LeveledLogger) {
	mods, err := kmod.ReadList(list)
	if err != nil {
		log.Warning(err)
		return
	}
	for _, m := range mods {
		if err := kmod.Load(m); err != nil {
			log.Warning(err)
		}
	}
}

// runInit is main when running as PID 1. It never returns: PID 1 exiting
// panics the kernel.
func runInit() {
	started := sinceBoot()
	lt := logtree.New(logtree.WithSink(os.Stderr))
	log := lt.LeveledFor("init")
	defer func() {
		// A panic in init would end PID 1 and panic the kernel, losing
		// the reason; turn it into an orderly reboot that logs it.
		if r := recover(); r != nil {
			defaults, _ := parseBootSettings(nil)
			halt(log, haltDecision{defaults.failCmd, defaults.failDelay, fmt.Sprintf("init panicked: %v", r)})
		}
	}()
	d := bootAndSupervise(log, lt, started)
	halt(log, d)
}

// sinceBoot is the kernel's CLOCK_BOOTTIME: how long it has run. Init
// logs when it started on this clock, with the clock's reading beside the
// line's own time of day, so that a boot's timeline can be read from the
// console alone: kernel until init, then init's and the node's log lines
// (the reboot benchmark, bench/reboot, does).
func sinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// bootAndSupervise prepares the machine and runs the node process; started
// is when init started (sinceBoot).
func bootAndSupervise(log logtree.LeveledLogger, lt *logtree.LogTree, started time.Duration) haltDecision {
	// Catch signals first: a SIGCHLD lost before Notify would leave the
	// node's exit unreaped until the next one.
	sigs := make(chan os.Signal, 16)
	signalNotify(sigs)
	// Ctrl-Alt-Del becomes SIGINT to init instead of an instant reboot.
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)

	defaults, _ := parseBootSettings(nil)
	if err := leaveRootfs(); err != nil {
		return haltDecision{defaults.failCmd, defaults.failDelay, err.Error()}
	}
	if err := mountEarly("", earlyMounts(), log); err != nil {
		return haltDecision{defaults.failCmd, defaults.failDelay, err.Error()}
	}
	if err := attachConsole("/dev/console"); err != nil {
		log.Warningf("console: %v", err)
	}
	log.Infof("init started at %.6fs of the boot clock (CLOCK_BOOTTIME), now %.6fs", started.Seconds(), sinceBoot().Seconds())
	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return haltDecision{defaults.failCmd, defaults.failDelay, fmt.Sprintf("reading kernel command line: %v", err)}
	}
	cmdline := parseCmdline(string(raw))
	settings, problems := parseBootSettings(cmdline)
	for _, p := range problems {
		log.Warning(p)
	}
	lt.SetVerbosity("", settings.verbosity)
	if h := settings.hostname; h != "" {
		if err := unix.Sethostname([]byte(h)); err != nil {
			log.Warningf("setting host name %q: %v", h, err)
		}
	}
	loadModules(imagelayout.ModuleList, log)
	// The kernel starts init without PATH; the node's child processes
	// (and anything they run) need one.
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", defaultPath)
	}
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	args := childArgs(cmdline, os.Args[1:])
	if err := linkKubeletDir("", kubeletDirOf(args)); err != nil {
		log.Warningf("%v", err)
	}
	st, shutdown, err := superviseNode(log, exe, args, sigs)
	return decideHalt(st, shutdown, err, settings)
}

// halt stops every remaining process, flushes and unmounts what it can, and
// reboots or powers off. If the kernel refuses, it waits forever.
func halt(log logtree.LeveledLogger, d haltDecision) {
	what := "powering off"
	if d.cmd == unix.LINUX_REBOOT_CMD_RESTART {
		what = "rebooting"
	}
	log.Errorf("%s in %s: %s", what, d.delay, d.reason)
	time.Sleep(d.delay)

	_ = unix.Kill(-1, unix.SIGTERM)
	start := time.Now()
	w := awaitTerm("/proc", killGrace)
	switch w.outcome {
	case termOnlyDeaf:
		log.Infof("%d processes left %s after SIGTERM, none of which it can end (containers' first processes without a handler for it, or processes ignoring it): killing them", len(w.left), time.Since(start).Round(time.Millisecond))
	case termGraceOver:
		log.Warningf("%d processes left after the %s grace, %d of them able to act on SIGTERM (%s): killing them",
			len(w.left), killGrace, len(w.listening), strings.Join(w.listening[:min(len(w.listening), 8)], ", "))
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	unix.Sync()
	unmountAll(log)
	unix.Sync()
	if err := unix.Reboot(d.cmd); err != nil {
		log.Errorf("%s failed: %v; halting here", what, err)
	}
	select {}
}

// unmountAll unmounts everything but / and init's own mounts, deepest
// first, so filesystems with data (the data partition) are clean.
func unmountAll(log logtree.LeveledLogger) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return
	}
	keep := map[string]bool{"/": true}
	for _, m := range earlyMounts() {
		keep[m.target] = true
	}
	var points []string
	for _, m := range mounts {
		if !keep[m.MountPoint] {
			points = append(points, m.MountPoint)
		}
	}
	slices.Reverse(points)
	for _, p := range points {
		if err := unix.Unmount(p, 0); err != nil {
			log.Warningf("unmounting %s: %v", p, err)
		}
	}
}
