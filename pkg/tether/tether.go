// Package tether starts child processes that die with their parent, and
// only with it.
//
// Linux's parent-death signal (SysProcAttr.Pdeathsig) is what ties a child
// to its parent, but the kernel sends it when the *thread* that forked the
// child ends, not the process (golang/go#27505). The Go runtime ends a
// thread whenever a goroutine locked to it returns without unlocking, which
// any library may do (a helper that changes a thread's credentials or
// namespaces, for one). A child forked by an ordinary goroutine then dies
// with SIGKILL at a random later moment, silently: its log just stops.
//
// Start forks the child from a goroutine that holds its thread locked
// until the child has been reaped, so no other goroutine can run on that
// thread, and the thread lives exactly as long as the child needs it.
package tether

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd with SIGKILL as its parent-death signal (other fields of
// cmd.SysProcAttr are kept) and reaps it when it exits. The returned
// channel has room for one value and receives cmd.Wait's result once; a
// caller may put a received value back for a later reader. Each running
// child holds one OS thread.
func Start(cmd *exec.Cmd) (chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only after Wait: the child is reaped by then, and the
		// thread may serve others again.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err // exec's errors name the program and the step
	}
	return exited, nil
}
