package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/launch"
)

// gvisorRuntime returns the cluster's gVisor runtime. Without one (no
// PLINTH_GVISOR_BIN) the test is skipped, except under CI=true, where
// test-e2e.sh always provides gVisor and a missing runtime is a failure.
func gvisorRuntime(t *testing.T, c *launch.Cluster) launch.Runtime {
	t.Helper()
	for _, r := range c.Runtimes() {
		if r.RuntimeClassName != nil && *r.RuntimeClassName == launch.GVisorRuntimeClass {
			return r
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the cluster has no gVisor runtime (%s is not set): CI must test gVisor", launch.GVisorBinEnv)
	}
	t.Skipf("no gVisor runtime: set %s (third_party/gvisor/build.sh), as make test-e2e does", launch.GVisorBinEnv)
	return launch.Runtime{}
}

// kernelProbe prints what tells a gVisor sandbox from the host kernel: the
// kernel version the pod sees and the first lines of its kernel log (gVisor
// writes its own, starting "Starting gVisor...").
const kernelProbe = `echo "version: $(cat /proc/version)"; echo "dmesg: $(dmesg 2>&1 | head -3 | tr '\n' ' ')"; `

// TestGVisorRuntimes runs the same probe pod under every runtime of the
// cluster. Under runc the pod sees the host's kernel; under gVisor it sees
// gVisor's, which is what lets TestGVisorVolumes tell that its pod really
// ran in a sandbox. The start times of the two are logged for comparison.
func TestGVisorRuntimes(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	gvisorRuntime(t, c)
	hostVersion, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	// Two rounds in opposite orders, so neither runtime always gets the
	// node's first pod (which waits for the pod network to come up).
	runtimes := c.Runtimes()
	for i := range 2 * len(runtimes) {
		r := runtimes[i%len(runtimes)]
		if i >= len(runtimes) {
			r = runtimes[len(runtimes)-1-i%len(runtimes)]
		}
		name := fmt.Sprintf("e2e-runtime-%s-%d", r.Name, i/len(runtimes))
		pod := busyboxPod(name, kernelProbe+"sleep 3600")
		pod.Spec.RuntimeClassName = r.RuntimeClassName
		start := time.Now()
		if _, err := c.Client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		t.Cleanup(func() { deletePod(t, c.Client, "default", name) })
		if err := waitPodRunning(context.Background(), c.Client, "default", name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: pod %s running %.1fs after creation", r.Name, name, time.Since(start).Seconds())
		logs := podLogs(t, c, name, "dmesg: ")
		onHost := strings.Contains(logs, "version: "+strings.TrimSpace(string(hostVersion)))
		inGVisor := strings.Contains(logs, "gVisor")
		if sandboxed := r.RuntimeClassName != nil; onHost == sandboxed || inGVisor != sandboxed {
			t.Errorf("%s: pod sees the host kernel: %v, a gVisor kernel log: %v; want %v, %v; its log:\n%s",
				r.Name, onHost, inGVisor, !sandboxed, sandboxed, logs)
		}
	}
}

// TestGVisorVolumes: a pod in a gVisor sandbox writes to a Plinth
// filesystem claim and reads it back, the bytes land in the volume on the
// node (through gVisor's gofer, not in the sandbox's own overlay), and a
// claim mounted read-only refuses writes inside the sandbox too. A block
// claim cannot reach a gVisor container as a device; the test shows what
// happens instead, so launch.Runtime's NoBlockReason stays true.
func TestGVisorVolumes(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	gv := gvisorRuntime(t, c)
	const (
		name    = "e2e-gvisor"
		payload = "written in a gVisor sandbox"
	)
	rw := createClaim(t, c, name, corev1.PersistentVolumeFilesystem, "16Mi")
	ro := createClaim(t, c, name+"-ro", corev1.PersistentVolumeFilesystem, "16Mi")
	pod := busyboxPod(name, kernelProbe+
		"echo '"+payload+"' > /data/file && sync && echo \"read back: $(cat /data/file)\"; "+
		"if touch /ro/x 2>/tmp/err; then echo 'read-only: WRITABLE'; else echo \"read-only: $(cat /tmp/err)\"; fi; "+
		"sleep 3600")
	pod.Spec.RuntimeClassName = gv.RuntimeClassName
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "ro", MountPath: "/ro"}}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: rw.Name}}},
		{Name: "ro", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ro.Name, ReadOnly: true}}},
	}
	pv := runPod(t, c, pod, rw)
	logs := podLogs(t, c, name, "read-only: ")
	if !strings.Contains(logs, "gVisor") {
		t.Fatalf("pod %s did not run in gVisor (no gVisor kernel log); its log:\n%s", name, logs)
	}
	if !strings.Contains(logs, "read back: "+payload) {
		t.Errorf("pod %s did not read back what it wrote; its log:\n%s", name, logs)
	}
	if !strings.Contains(logs, "read-only: touch: /ro/x: Read-only file system") {
		t.Errorf("read-only claim in pod %s: want EROFS; its log:\n%s", name, logs)
	}
	file := filepath.Join(c.DataDir, "volumes", pv.Name, "file")
	await.For(t, t.Context(), 30*time.Second, "the sandbox's file in "+file, func() (bool, error) {
		got, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return strings.TrimSpace(string(got)) == payload, err
	})
	roPV := boundPV(t, c, ro.Name).Name
	if entries, err := os.ReadDir(filepath.Join(c.DataDir, "volumes", roPV)); err != nil || len(entries) != 0 {
		t.Errorf("read-only volume %s holds %v (%v), want nothing", roPV, entries, err)
	}

	t.Run("block", func(t *testing.T) {
		if gv.Block {
			t.Fatalf("launch.Runtimes says gVisor passes block devices; this test shows it does not")
		}
		const (
			bname    = "e2e-gvisor-block"
			bpayload = "raw bytes from a gVisor sandbox"
		)
		bpvc := createClaim(t, c, bname, corev1.PersistentVolumeBlock, "16Mi")
		bpod := busyboxPod(bname, "if [ -b /dev/xvda ]; then echo 'node: block'; else echo 'node: none'; fi; "+
			"if printf '"+bpayload+"' | dd of=/dev/xvda conv=fsync 2>/tmp/err; then echo 'write: ok'; else echo \"write: failed: $(cat /tmp/err)\"; fi; "+
			"if dd if=/dev/xvda bs=512 count=1 >/tmp/out 2>/tmp/err; then echo \"read: ok: $(cat /tmp/out)\"; else echo \"read: failed: $(cat /tmp/err)\"; fi; "+
			"sleep 3600")
		bpod.Spec.RuntimeClassName = gv.RuntimeClassName
		bpod.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
		bpod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: bpvc.Name},
		}}}
		bpv := runPod(t, c, bpod, bpvc)
		blogs := podLogs(t, c, bname, "read: ")
		t.Logf("block claim under gVisor (%s); the pod's log:\n%s", gv.NoBlockReason, blogs)
		if !strings.Contains(blogs, "write: failed") || !strings.Contains(blogs, "read: failed") {
			t.Errorf("the block claim worked in gVisor; launch.Runtimes must say so; the pod's log:\n%s", blogs)
		}
		image := filepath.Join(c.DataDir, "volumes", bpv.Name+".img")
		got, err := os.ReadFile(image)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(got), bpayload) {
			t.Errorf("the gVisor pod's bytes reached the block volume's image %s", image)
		}
	})
}

// podLogs waits until the pod's log contains want and returns the log.
func podLogs(t *testing.T, c *launch.Cluster, pod, want string) string {
	t.Helper()
	waitLogs(t, c, pod, want)
	logs, err := c.Client.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the log of pod %s: %v", pod, err)
	}
	return string(logs)
}
