package launch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"source.plinth.dev/pkg/tether"
)

// process is one supervised component. A component that exits while the
// cluster is up is a failure of the whole cluster, not something to
// restart: tests must see crashes, not have them papered over.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
	err     error         // exit status; valid after done is closed

	mu       sync.Mutex
	stopping bool
}

// startProcess starts bin with args in its own process group, with output
// going to logDir/<name>.log. onExit is called (in a goroutine) if the
// process ends before stop was called.
func startProcess(name, logDir, bin string, args, env []string, onExit func(*process)) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if env != nil {
		cmd.Env = env
	}
	// Own process group, so stop can signal everything the component
	// forked (but see host.Sweep for what escapes it, like containerd
	// shims). If the launcher is killed outright, tether takes the
	// component with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(logFile, "+ %s %s\n", bin, strings.Join(args, " "))
	exited, err := tether.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = <-exited
		close(p.done)
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if !stopping && onExit != nil {
			onExit(p)
		}
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failure describes an unexpected exit, with the end of the log, so that a
// test failure says why a component died without digging for files.
func (p *process) failure() error {
	return fmt.Errorf("%s exited unexpectedly (%v); last log lines from %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

// stop sends SIGTERM to the process group, waits up to grace, then kills
// the group.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	if p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything else left in the group (helpers the component forked).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + string(bytes.Join(lines, []byte("\n    ")))
}
