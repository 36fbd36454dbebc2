// Package process runs a child program as a supervised runnable: the way
// plinth-node runs containerd and the kubelet.
//
// A daemon the node depends on has the same life as any runnable of the
// tree: it is started, becomes healthy only once it actually serves (not
// when exec succeeded), fails when it exits (so the supervisor restarts it
// with backoff), and is stopped when its context ends. What a process adds
// is what can leak: the child and whatever it started. So the child gets a
// process group of its own, and every end of the runnable (stop, exit,
// failed readiness) ends with the whole group killed and the child reaped
// before the runnable returns: a restart never finds the previous
// incarnation's helpers still holding a socket or a lock.
//
// Processes that leave their parent's group on purpose are not killed:
// containerd's shims make their own group so that containers outlive a
// containerd restart, which is what containerd wants.
//
// The child's stdout and stderr go line by line into the runnable's logger
// (klog lines keep their severity, see logtree.KLogParser), so the
// console and the log tree show them with the runnable's DN.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/pkg/tether"
)

// Defaults of Spec's durations.
const (
	// DefaultStopGrace is how long a stopping child may take after SIGTERM
	// before its group is killed: containerd and the kubelet shut down in
	// well under a second when healthy; a stuck one must not hold up the
	// half minute plinth-node gives its whole tree.
	DefaultStopGrace = 10 * time.Second
	// DefaultReadyInterval is how often Ready is polled.
	DefaultReadyInterval = 100 * time.Millisecond
)

// pipeDrain bounds how long the output of an ended child is still read: a
// grandchild that left the group (a containerd shim) may hold the pipes
// open for ever; what it writes after this is lost, which is fine because
// it logs elsewhere.
const pipeDrain = time.Second

// Spec describes a child process.
type Spec struct {
	// Path is the program; Args its arguments (without argv[0]).
	Path string
	Args []string
	// Env is the child's environment; nil inherits this process's.
	Env []string
	// Dir is the working directory ("" inherits).
	Dir string
	// Ready reports whether the child serves yet (e.g. its socket accepts
	// connections). It is polled every ReadyInterval until it returns
	// nil; the runnable then signals Healthy. nil means healthy at once.
	Ready func(ctx context.Context) error
	// ReadyInterval is the polling period of Ready (default
	// DefaultReadyInterval).
	ReadyInterval time.Duration
	// ReadyTimeout, if positive, fails the runnable (the child is killed
	// and restarted with backoff) when Ready has not returned nil within
	// it. Zero waits as long as the child runs.
	ReadyTimeout time.Duration
	// StopGrace is the time between SIGTERM and SIGKILL when the runnable
	// stops (default DefaultStopGrace).
	StopGrace time.Duration
}

func (s Spec) name() string {
	return strings.Join(append([]string{s.Path}, s.Args...), " ")
}

// Runnable returns a runnable that runs spec's program for as long as the
// runnable runs. The child's exit, whatever its status, is an error (a
// daemon has no business ending while the node needs it). The runnable
// returns only once the child's group has been killed and the child
// reaped.
func Runnable(spec Spec) supervisor.Runnable {
	return func(ctx context.Context) error {
		return run(ctx, supervisor.Logger(ctx), spec, true)
	}
}

// Run runs spec's program to completion (a one-shot command such as an
// image import) with its output logged to log. It returns nil if the
// program exits 0. If ctx ends first, the program's group is stopped
// (SIGTERM, then SIGKILL after StopGrace) and ctx's error returned.
// Spec.Ready is not used.
func Run(ctx context.Context, log logtree.LeveledLogger, spec Spec) error {
	spec.Ready = nil
	return run(ctx, log, spec, false)
}

// run is Runnable (daemon: healthy once Ready, and any exit an error) and
// Run: it starts the child, and returns once the child has ended, or has
// been stopped because ctx ended, and its group is killed.
func run(ctx context.Context, log logtree.LeveledLogger, spec Spec, daemon bool) error {
	if spec.StopGrace <= 0 {
		spec.StopGrace = DefaultStopGrace
	}
	if spec.ReadyInterval <= 0 {
		spec.ReadyInterval = DefaultReadyInterval
	}
	out := logtree.KLogParser(log)
	defer out.Close()
	c, err := start(log, spec, daemon, out)
	if err != nil {
		return err
	}
	if daemon {
		if err := c.untilReady(ctx); err != nil {
			return err
		}
		log.Infof("%s is ready", spec.Path)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
	select {
	case err := <-c.exited:
		return c.ended(err)
	case <-ctx.Done():
		c.stop("context ended")
		<-c.exited
		return ctx.Err()
	}
}

// child is a child process that run started.
type child struct {
	spec   Spec
	log    logtree.LeveledLogger
	daemon bool
	cmd    *exec.Cmd
	pid    int
	// exited receives the child's exit (see tether.Start).
	exited chan error
}

// start starts spec's program in a process group of its own, its output
// going to out.
func start(log logtree.LeveledLogger, spec Spec, daemon bool, out io.Writer) (*child, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = pipeDrain
	// Own group: the group is what is signalled and killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// If plinth-node dies without stopping its tree (a crash, a SIGKILL),
	// its children must not live on unsupervised: a new plinth-node would
	// start a second containerd beside them. tether ties each to the
	// process (not to a thread the runtime may end).
	exited, err := tether.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.name(), err)
	}
	c := &child{spec: spec, log: log, daemon: daemon, cmd: cmd, pid: cmd.Process.Pid, exited: exited}
	log.Infof("started %s (pid %d)", spec.name(), c.pid)
	return c, nil
}

// untilReady waits until the child serves (awaitReady). If it does not,
// the child is ended: stopped if it still runs, and reaped.
func (c *child) untilReady(ctx context.Context) error {
	err := awaitReady(ctx, c.spec, c.exited)
	if err == nil {
		return nil
	}
	select {
	case werr := <-c.exited:
		return fmt.Errorf("%w (%w)", err, c.ended(werr))
	default:
	}
	c.stop(err.Error())
	<-c.exited
	return err
}

// killGroup kills what is left of the child's group (its helpers that
// stayed in it), once the child itself has ended or is being stopped.
// The child itself is killed by PID too: should its group ever be gone (a
// child that moved itself to another group), the runnable must still not
// wait for ever on a child that ignored SIGTERM.
func (c *child) killGroup() {
	if err := unix.Kill(-c.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		c.log.Warningf("killing process group %d: %v", c.pid, err)
	}
	_ = c.cmd.Process.Kill()
}

// stop ends the child: SIGTERM to the group, SIGKILL after the grace.
// The child's exit is left in exited for the caller.
func (c *child) stop(why string) {
	c.log.Infof("stopping %s (pid %d): %s", c.spec.Path, c.pid, why)
	if err := unix.Kill(-c.pid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		c.log.Warningf("signalling process group %d: %v", c.pid, err)
	}
	timer := time.NewTimer(c.spec.StopGrace)
	defer timer.Stop()
	select {
	case err := <-c.exited:
		c.exited <- err
	case <-timer.C:
		c.log.Warningf("%s (pid %d) still running %s after SIGTERM; killing its group", c.spec.Path, c.pid, c.spec.StopGrace)
	}
	c.killGroup()
}

// ended reports the child's end, err from exited, as an error (any end
// of a daemon is one), after killing its group.
func (c *child) ended(err error) error {
	c.killGroup()
	if err == nil {
		if c.daemon {
			return fmt.Errorf("%s (pid %d) exited with status 0", c.spec.Path, c.pid)
		}
		c.log.Infof("%s (pid %d) finished", c.spec.Path, c.pid)
		return nil
	}
	return fmt.Errorf("%s (pid %d) failed: %w", c.spec.Path, c.pid, err)
}

// awaitReady polls spec.Ready until it succeeds. It fails if the child
// exits (the exit is put back into exited for the caller), if ctx ends or
// if ReadyTimeout passes.
func awaitReady(ctx context.Context, spec Spec, exited chan error) error {
	if spec.Ready == nil {
		return nil
	}
	var timeout <-chan time.Time
	if spec.ReadyTimeout > 0 {
		t := time.NewTimer(spec.ReadyTimeout)
		defer t.Stop()
		timeout = t.C
	}
	tick := time.NewTicker(spec.ReadyInterval)
	defer tick.Stop()
	var last error
	for {
		pollCtx, cancel := context.WithTimeout(ctx, max(spec.ReadyInterval, time.Second))
		last = spec.Ready(pollCtx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("%s ended before it was ready (last check: %v)", spec.Path, last)
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("%s not ready within %s: %w", spec.Path, spec.ReadyTimeout, last)
		case <-tick.C:
		}
	}
}

// UnixSocketReady returns a Ready check that succeeds once a connection to
// the Unix socket at path is accepted: the daemon has bound and listens,
// which for a gRPC server (containerd) means it serves.
func UnixSocketReady(path string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
