package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch/host"
)

// crash simulates a launcher that dies without tearing down: every
// component's process group is killed (containerd shims and containers
// survive, as they would), mounts stay, and the lock is released with its
// state still naming this cluster.
func (c *Cluster) crash() {
	c.mu.Lock()
	c.stopped = true
	procs := c.procs
	c.mu.Unlock()
	for _, p := range procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	c.lock.Close()
	c.lock = nil
}

// runPod starts a busybox pod with an emptyDir (a tmpfs-free bind mount
// and a pod netns to clean up later) and waits until it runs.
func runPod(t *testing.T, c *Cluster, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	never := corev1.PullNever
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxRef, ImagePullPolicy: never,
				Command:      []string{"sh", "-c", "sleep 3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
			}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	for {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s not running: %v", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestLifecycle runs the paths a developer hits: a second launch while one
// runs is refused without side effects; a launcher that crashed with a pod
// running is cleaned up by the next launch; and a normal Stop leaves the
// host as it was (mounts, loop devices, processes, network links).
func TestLifecycle(t *testing.T) {
	if os.Getenv("PLINTH_E2E") != "1" {
		t.Skip("cluster test: run with make test-e2e (PLINTH_E2E=1)")
	}
	RequireRoot(t)
	base, err := os.MkdirTemp("/tmp", "plinth-lc-")
	if err != nil {
		t.Fatal(err)
	}
	before := host.TakeSnapshot(base)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dirA, dirB := filepath.Join(base, "a"), filepath.Join(base, "b")
	var logw = os.Stderr
	if !testing.Verbose() {
		logw = nil
	}

	a, err := Start(ctx, Config{Dir: dirA, WaitForLock: true, Log: logw})
	if err != nil {
		t.Fatalf("starting cluster a: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			a.crash()
			_ = host.Sweep(dirA, a.base)
		}
	}()

	_, err = Start(ctx, Config{Dir: dirB})
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Dir != dirA {
		t.Fatalf("second launch while a runs: err = %v, want *BusyError naming %s", err, dirA)
	}
	if _, err := os.Stat(dirB); !os.IsNotExist(err) {
		t.Errorf("refused launch created %s (stat: %v)", dirB, err)
	}

	runPod(t, a, "before-crash")
	if len(host.MountsUnder(dirA)) < 2 || len(host.LoopsUnder(dirA)) != 1 {
		t.Fatalf("cluster a should hold mounts and its data loop device: mounts %v, loops %v", host.MountsUnder(dirA), host.LoopsUnder(dirA))
	}
	a.crash()
	if len(host.ClusterProcesses(dirA, a.base)) == 0 {
		t.Fatal("after the simulated crash, no shim or container survived; the test no longer exercises recovery")
	}

	b, err := Start(ctx, Config{Dir: dirB, WaitForLock: true, Log: logw})
	stopped = true
	if err != nil {
		t.Fatalf("starting cluster b after a crashed launcher: %v", err)
	}
	if l := host.FindLeftovers(dirA, a.base); len(l.Processes)+len(l.Mounts)+len(l.LoopDevices) > 0 {
		t.Errorf("launch b did not clean up after crashed a: %s", l)
	}
	runPod(t, b, "after-recovery")

	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("stopping b: %v", err)
	}
	if diff := before.Diff(host.TakeSnapshot(base)); diff != "" {
		t.Errorf("host state after teardown differs from before:\n%s", diff)
	}
	if l := host.FindLeftovers(dirB, b.base); !l.Empty() {
		t.Errorf("leftovers of b: %s", l)
	}
	entries, _ := os.ReadDir(dirB)
	for _, e := range entries {
		if e.Name() != "logs" && e.Name() != markerFile {
			t.Errorf("work directory keeps %s after Stop", e.Name())
		}
	}
	if !t.Failed() {
		os.RemoveAll(base)
	}
}
