package tether

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onDyingThread runs start on a goroutine locked to a thread that ends
// when start returns, and waits until the kernel has seen that thread end.
// The runtime never ends the main thread (it parks it instead), so a
// goroutine that lands there keeps it until the test ends, and the next
// try runs elsewhere.
func onDyingThread(t *testing.T, start func()) {
	t.Helper()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	for range 5 {
		tid := make(chan int, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if unix.Gettid() == unix.Getpid() {
				tid <- 0
				<-hold
				runtime.UnlockOSThread()
				return
			}
			start()
			tid <- unix.Gettid()
		}()
		id := <-tid
		if id == 0 {
			continue
		}
		task := "/proc/self/task/" + strconv.Itoa(id)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %d did not end after its locked goroutine returned", id)
			}
		}
	}
	t.Fatal("every try ran on the main thread")
}

// TestChildOutlivesItsStartersThread starts a child from a goroutine whose
// thread then ends; the child must live on until it is killed.
func TestChildOutlivesItsStartersThread(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "60")
	var exited chan error
	onDyingThread(t, func() {
		var err error
		if exited, err = Start(cmd); err != nil {
			t.Error(err)
		}
	})
	if exited == nil {
		t.FailNow()
	}
	select {
	case err := <-exited:
		t.Fatalf("the child ended with its starter's thread: %v", err)
	case <-time.After(time.Second):
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; !killed(err) {
		t.Fatalf("child exited with %v after SIGKILL", err)
	}
}

// TestPlainStartDiesWithThread is the negative control: the same child,
// started with a plain exec.Cmd.Start and the same parent-death signal,
// is killed when its starter's thread ends. Were it not, the test above
// could not tell Start from exec.Cmd.Start.
func TestPlainStartDiesWithThread(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	onDyingThread(t, func() {
		if err := cmd.Start(); err != nil {
			t.Error(err)
		}
	})
	if cmd.Process == nil {
		t.FailNow()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if !killed(err) {
			t.Fatalf("child exited with %v, want killed by its parent-death signal", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("a plainly started child outlived its starter's thread: the kernel or runtime changed, and the test above proves nothing")
	}
}

// TestStartError: a program that cannot be started is an error, and
// nothing waits for it.
func TestStartError(t *testing.T) {
	if _, err := Start(exec.Command("/nonexistent/program")); err == nil {
		t.Fatal("Start of a missing program succeeded")
	}
}

func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
