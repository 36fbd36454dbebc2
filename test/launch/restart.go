package launch

import (
	"errors"
	"fmt"
	"syscall"
)

// Kill ends a running component ("plinth-node", "kubelet", ...) and
// everything in its process group with SIGKILL, as a crash would, without
// failing the cluster: a test that kills a component on purpose restarts
// it with Restart. It returns once the process has exited.
func (c *Cluster) Kill(component string) error {
	p := c.running(component)
	if p == nil {
		return fmt.Errorf("killing %s: no such component running", component)
	}
	p.mu.Lock()
	p.stopping = true // not a failure of the cluster
	p.mu.Unlock()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", component, err)
	}
	<-p.done
	return nil
}

// Restart starts a component that Kill ended, with the command line and
// environment it had; its log continues in the same file. From then on,
// its unexpected exit fails the cluster again.
func (c *Cluster) Restart(component string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.procs) - 1; i >= 0; i-- {
		old := c.procs[i]
		if old.name != component {
			continue
		}
		if !old.exited() {
			return fmt.Errorf("restarting %s: it is still running", component)
		}
		p, err := startProcess(old.name, c.LogDir, old.cmd.Path, old.cmd.Args[1:], old.cmd.Env, c.fail)
		if err != nil {
			return fmt.Errorf("restarting %s: %w", component, err)
		}
		c.procs[i] = p
		return nil
	}
	return fmt.Errorf("restarting %s: no such component", component)
}

// running returns the running process of component, or nil.
func (c *Cluster) running(component string) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == component && !p.exited() {
			return p
		}
	}
	return nil
}
