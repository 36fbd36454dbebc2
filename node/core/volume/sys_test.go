package volume

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/test/ktest"
)

// TestFallocateOutlastsSignals: the node's kernel (Debian's 6.1, also the
// kernel VM's) abandons a tmpfs allocation at any pending signal, and Go's
// runtime sends SIGURG to preempt a goroutine, so a fallocate on tmpfs
// can fail with EINTR at random (a CI run of the kernel VM did). The
// engine's fallocate must finish anyway. The thread making the call is
// shot with a burst of SIGURG; the raw system call under the same fire
// must see EINTR, or the harness proves nothing. Newer kernels abort only
// at fatal signals, so the test runs in the VM.
func TestFallocateOutlastsSignals(t *testing.T) {
	ktest.RequireVM(t)
	const size = 16 * MiB
	dir := tmpfsDir(t, 2*size)
	rawEINTR := false
	for range 20 {
		err := underFire(t, func() error {
			f, err := os.Create(dir + "/raw")
			if err != nil {
				return err
			}
			defer f.Close()
			return unix.Fallocate(int(f.Fd()), 0, 0, size)
		})
		if errors.Is(err, unix.EINTR) {
			rawEINTR = true
			break
		}
		if err != nil {
			t.Fatalf("raw fallocate: %v", err)
		}
		if err := os.Remove(dir + "/raw"); err != nil {
			t.Fatal(err)
		}
	}
	if !rawEINTR {
		t.Fatal("negative control: 20 raw fallocates under SIGURG never saw EINTR, so the test cannot tell a retry from luck")
	}
	for i := range 5 {
		err := underFire(t, func() error {
			f, err := os.Create(dir + "/engine")
			if err != nil {
				return err
			}
			defer f.Close()
			if err := fallocate(f, 0, size); err != nil {
				return err
			}
			return os.Remove(f.Name())
		})
		if err != nil {
			t.Fatalf("fallocate %d under SIGURG: %v", i, err)
		}
	}
}

// underFire runs op on a locked OS thread while another goroutine sends
// that thread SIGURG (which the Go runtime takes and ignores) every 100 µs
// for the first 50 ms or until op returns. A burst, not a siege: tmpfs
// frees what an interrupted allocation got, so a retry only finishes once
// the signals pause, as they do on a real node.
func underFire(t *testing.T, op func() error) error {
	t.Helper()
	tid := make(chan int)
	result := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		result <- op()
	}()
	target, pid := <-tid, os.Getpid()
	for range 500 {
		select {
		case err := <-result:
			return err
		default:
		}
		if err := unix.Tgkill(pid, target, unix.SIGURG); err != nil {
			t.Fatalf("tgkill: %v", err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return <-result
}
