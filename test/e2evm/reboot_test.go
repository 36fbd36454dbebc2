package e2evm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
)

// rebootScript is the container of the reboot test's pod: on its first run
// it writes one marker to the filesystem claim and one to each block claim
// (at the first bytes of the device), and on every later run it prints what
// it finds, with the kernel's boot ID (not namespaced), so that a line
// from before a reboot is never taken for one after it. Two block claims,
// so that a device node left over from the
// previous boot, naming a loop device by number, would show the other
// claim's marker (loop devices are attached anew, in no fixed order).
const rebootScript = `set -e
if [ -f /data/marker ]; then
  echo "FOUND boot=$(cat /proc/sys/kernel/random/boot_id) fs=$(cat /data/marker) a=$(head -c ${#A} /dev/blk-a) b=$(head -c ${#B} /dev/blk-b)"
else
  printf %s "$A" | dd of=/dev/blk-a conv=fsync 2>/dev/null
  printf %s "$B" | dd of=/dev/blk-b conv=fsync 2>/dev/null
  echo "$FS" > /data/marker.tmp && sync /data/marker.tmp && mv /data/marker.tmp /data/marker && sync /data
  echo WROTE
fi
exec sleep 1000000`

// TestVolumesSurviveReboot reboots the node twice under a running pod with
// a filesystem and two block claims: once cleanly, once by cutting the
// power. Each time the pod comes back on the same node, and what it wrote
// before is what it reads after, through fresh loop devices.
func TestVolumesSurviveReboot(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "reboot")
	cs := w.cp.Client
	fsMarker, a, b := "fs-"+token(t), "blka-"+token(t), "blkb-"+token(t)

	fs := claim("data", corev1.PersistentVolumeFilesystem, "1Mi")
	blkA := claim("blk-a", corev1.PersistentVolumeBlock, "1Mi")
	blkB := claim("blk-b", corev1.PersistentVolumeBlock, "1Mi")
	for _, c := range []*corev1.PersistentVolumeClaim{fs, blkA, blkB} {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:       []string{"sh", "-c", rebootScript},
				Env:           []corev1.EnvVar{{Name: "FS", Value: fsMarker}, {Name: "A", Value: a}, {Name: "B", Value: b}},
				VolumeMounts:  []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				VolumeDevices: []corev1.VolumeDevice{{Name: "blk-a", DevicePath: "/dev/blk-a"}, {Name: "blk-b", DevicePath: "/dev/blk-b"}},
			}},
			Volumes: []corev1.Volume{claimVolume("data"), claimVolume("blk-a"), claimVolume("blk-b")},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitLog(ctx, w, ns, pod.Name, "WROTE", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	found := fmt.Sprintf("fs=%s a=%s b=%s", fsMarker, a, b)

	for _, how := range []string{"clean", "power cut"} {
		t.Logf("rebooting the node (%s)", how)
		var err error
		if how == "clean" {
			err = w.node.Stop(ctx, 3*time.Minute)
		} else {
			err = w.node.PowerCut()
		}
		if err != nil {
			t.Fatalf("stopping the node (%s): %v", how, err)
		}
		start := time.Now()
		if err := w.node.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.node.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("node Ready %.1fs after the %s reboot", time.Since(start).Seconds(), how)
		// WaitReady waited for the node to show a new boot ID.
		node, err := cs.CoreV1().Nodes().Get(ctx, w.node.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		prefix := foundPrefix(node.Status.NodeInfo.BootID)
		line, err := waitLog(ctx, w, ns, pod.Name, prefix, 5*time.Minute)
		if err != nil {
			t.Fatalf("after the %s reboot: %v", how, err)
		}
		if want := prefix + found; line != want {
			t.Errorf("after the %s reboot the pod read %q, want %q", how, line, want)
		}
	}
}

// foundPrefix starts the line the reboot test's pod prints on the boot
// with bootID, up to the markers it read: the boot ID ends at the space,
// so that no line of another boot (nor, for an empty ID, of any boot)
// starts with it.
func foundPrefix(bootID string) string {
	return "FOUND boot=" + bootID + " "
}

func claim(name string, mode corev1.PersistentVolumeMode, size string) *corev1.PersistentVolumeClaim {
	class := names.StorageClassName
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			VolumeMode:       &mode,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			},
		},
	}
}

func claimVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
	}}
}

func token(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func ptr[T any](v T) *T { return &v }

// newNamespace creates a namespace for one test and deletes it (and so its
// claims and pods) afterwards.
func newNamespace(t *testing.T, w *world, prefix string) string {
	t.Helper()
	ns, err := w.cp.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// waitLog waits until the pod's current container log has a line starting
// with prefix, and returns that line. The log comes from the kubelet in the
// VM, through the apiserver: the path kubectl logs takes.
func waitLog(ctx context.Context, w *world, ns, pod, prefix string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		b, err := w.cp.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil {
			if l, ok := lineWithPrefix(string(b), prefix); ok {
				return l, nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("pod %s/%s logged no %q line: %w; last log or error: %s; events: %s", ns, pod, prefix, ctx.Err(), last, await.Events(ctx, w.cp.Client, ns, pod))
		case <-time.After(2 * time.Second):
		}
	}
}

// lineWithPrefix returns the first line of log that starts with prefix.
func lineWithPrefix(log, prefix string) (string, bool) {
	for l := range strings.Lines(log) {
		if l = strings.TrimSuffix(l, "\n"); strings.HasPrefix(l, prefix) {
			return l, true
		}
	}
	return "", false
}
