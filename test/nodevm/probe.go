package nodevm

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
)

// The reboot probe is the pod that says, after every reboot of the VM node,
// what it reads from its volumes: the reboot test (test/e2evm) checks what
// it says, the reboot benchmark (bench/reboot) times when it says it. One
// pod for both, so that the benchmark measures the path the test proves.

// ProbeScript is the probe's container: on its first run it writes one
// marker ($FS) to the directory at /data and one to each block device
// named (at its first bytes: $A to /dev/blk-a, $B to /dev/blk-b; an empty
// marker means no such device), and on every later run it prints what it
// finds, with the kernel's boot ID (not namespaced), so that a line from
// before a reboot is never taken for one after it. With two block claims a
// device node left over from the previous boot, naming a loop device by
// number, would show the other claim's marker (loop devices are attached
// anew, in no fixed order).
const ProbeScript = `set -e
blk() { [ -z "$2" ] || head -c ${#2} "$1"; }
if [ -f /data/marker ]; then
  echo "FOUND boot=$(cat /proc/sys/kernel/random/boot_id) fs=$(cat /data/marker) a=$(blk /dev/blk-a "$A") b=$(blk /dev/blk-b "$B")"
else
  [ -z "$A" ] || printf %s "$A" | dd of=/dev/blk-a conv=fsync 2>/dev/null
  [ -z "$B" ] || printf %s "$B" | dd of=/dev/blk-b conv=fsync 2>/dev/null
  echo "$FS" > /data/marker.tmp && sync /data/marker.tmp && mv /data/marker.tmp /data/marker && sync /data
  echo WROTE
fi
exec sleep 1000000`

// ProbeMarkers are what the probe writes and must read back.
type ProbeMarkers struct{ FS, A, B string }

// Found is the rest of the probe's FOUND line after FoundPrefix when it
// read back m.
func (m ProbeMarkers) Found() string {
	return fmt.Sprintf("fs=%s a=%s b=%s", m.FS, m.A, m.B)
}

// ProbePod is the probe named name. With claims, /data is the filesystem
// claim "data" and /dev/blk-a and /dev/blk-b the block claims "blk-a" and
// "blk-b" (ProbeClaims); without, /data is an emptyDir on the node's disk
// and m.A and m.B must be empty: the same pod reading the same marker from
// a directory the kubelet alone provides.
func ProbePod(name string, m ProbeMarkers, claims bool) *corev1.Pod {
	c := corev1.Container{
		Name: "main", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
		Command:      []string{"sh", "-c", ProbeScript},
		Env:          []corev1.EnvVar{{Name: "FS", Value: m.FS}, {Name: "A", Value: m.A}, {Name: "B", Value: m.B}},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
	}
	vols := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if claims {
		c.VolumeDevices = []corev1.VolumeDevice{{Name: "blk-a", DevicePath: "/dev/blk-a"}, {Name: "blk-b", DevicePath: "/dev/blk-b"}}
		vols = []corev1.Volume{ClaimVolume("data"), ClaimVolume("blk-a"), ClaimVolume("blk-b")}
	}
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			Containers:                    []corev1.Container{c},
			Volumes:                       vols,
		},
	}
}

// ProbeClaims are the claims of a ProbePod with claims: 1 MiB each, one
// filesystem and two block claims.
func ProbeClaims() []*corev1.PersistentVolumeClaim {
	return []*corev1.PersistentVolumeClaim{
		Claim("data", corev1.PersistentVolumeFilesystem, "1Mi"),
		Claim("blk-a", corev1.PersistentVolumeBlock, "1Mi"),
		Claim("blk-b", corev1.PersistentVolumeBlock, "1Mi"),
	}
}

// FoundPrefix starts the line the probe prints on the boot with bootID,
// up to the markers it read: the boot ID ends at the space, so that no
// line of another boot (nor, for an empty ID, of any boot) starts with it.
func FoundPrefix(bootID string) string {
	return "FOUND boot=" + bootID + " "
}

// Claim is a claim of Plinth's storage class.
func Claim(name string, mode corev1.PersistentVolumeMode, size string) *corev1.PersistentVolumeClaim {
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

// ClaimVolume is a pod's volume of the claim name, under the same name.
func ClaimVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
	}}
}

// WaitLog waits until the pod's current container log has a line starting
// with prefix, and returns that line. The log comes from the kubelet in the
// VM, through the apiserver: the path kubectl logs takes. With timestamps,
// each line starts with the time the container runtime read it (RFC 3339,
// nanoseconds, the node's clock) and a space, before the prefix.
func WaitLog(ctx context.Context, client kubernetes.Interface, ns, pod, prefix string, timestamps bool, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		b, err := client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Timestamps: timestamps}).DoRaw(ctx)
		if err == nil {
			if l, ok := lineWithPrefix(string(b), prefix, timestamps); ok {
				return l, nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("pod %s/%s logged no %q line: %w; last log or error: %s; events: %s", ns, pod, prefix, ctx.Err(), last, await.Events(ctx, client, ns, pod))
		case <-time.After(2 * time.Second):
		}
	}
}

// LineWithPrefix returns the first line of log that starts with prefix.
func LineWithPrefix(log, prefix string) (string, bool) {
	return lineWithPrefix(log, prefix, false)
}

// lineWithPrefix is LineWithPrefix; with timestamps, each line's first
// word (the runtime's timestamp) is skipped before the comparison, and
// kept in the line returned.
func lineWithPrefix(log, prefix string, timestamps bool) (string, bool) {
	for l := range strings.Lines(log) {
		l = strings.TrimSuffix(l, "\n")
		rest := l
		if timestamps {
			_, rest, _ = strings.Cut(l, " ")
		}
		if strings.HasPrefix(rest, prefix) {
			return l, true
		}
	}
	return "", false
}
