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

func run(ctx context.Context, log logtree.LeveledLogger, spec Spec, daemon bool) error {
	if spec.StopGrace <= 0 {
		spec.StopGrace = DefaultStopGrace
	}
	if spec.ReadyInterval <= 0 {
		spec.ReadyInterval = DefaultReadyInterval
	}
	out := logtree.KLogParser(log)
	defer out.Close()
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
		return fmt.Errorf("starting %s: %w", spec.name(), err)
	}
	pid := cmd.Process.Pid
	log.Infof("started %s (pid %d)", spec.name(), pid)

	// killGroup kills what is left of the child's group (its helpers that
	// stayed in it), once the child itself has ended or is being stopped.
	// The child itself is killed by PID too: should its group ever be
	// gone (a child that moved itself to another group), the runnable
	// must still not wait for ever on a child that ignored SIGTERM.
	killGroup := func() {
		if err := unix.Kill(-pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			log.Warningf("killing process group %d: %v", pid, err)
		}
		_ = cmd.Process.Kill()
	}
	// stop ends the child: SIGTERM to the group, SIGKILL after the grace.
	stop := func(why string) {
		log.Infof("stopping %s (pid %d): %s", spec.Path, pid, why)
		if err := unix.Kill(-pid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
			log.Warningf("signalling process group %d: %v", pid, err)
		}
		timer := time.NewTimer(spec.StopGrace)
		defer timer.Stop()
		select {
		case err := <-exited:
			exited <- err
		case <-timer.C:
			log.Warningf("%s (pid %d) still running %s after SIGTERM; killing its group", spec.Path, pid, spec.StopGrace)
		}
		killGroup()
	}
	// ended reports the child's end as an error, after killing its group.
	ended := func(err error) error {
		killGroup()
		if err == nil {
			if daemon {
				return fmt.Errorf("%s (pid %d) exited with status 0", spec.Path, pid)
			}
			log.Infof("%s (pid %d) finished", spec.Path, pid)
			return nil
		}
		return fmt.Errorf("%s (pid %d) failed: %w", spec.Path, pid, err)
	}

	if daemon {
		if err := awaitReady(ctx, spec, exited); err != nil {
			select {
			case werr := <-exited:
				return fmt.Errorf("%w (%w)", err, ended(werr))
			default:
			}
			stop(err.Error())
			<-exited
			return err
		}
		log.Infof("%s is ready", spec.Path)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
	select {
	case err := <-exited:
		return ended(err)
	case <-ctx.Done():
		stop("context ended")
		<-exited
		return ctx.Err()
	}
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
