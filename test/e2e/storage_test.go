package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/launch"
)

// The storage tests use Plinth the way a cluster user does: a PVC of the
// default StorageClass and a pod, nothing else. The provisioner turns the
// claim into a volume on the node's XFS data filesystem, the scheduler and
// the kubelet (the patched build) call the CSI plugin, and deleting the
// claim must remove the PV and the volume's data. They run in parallel on
// the shared cluster; each uses its own object names.

// TestFilesystemVolume: data written by one pod is read by the next, the
// kubelet reports the volume's capacity in its metrics, the node tells the
// user when it cannot enforce that capacity, and deleting the claim removes
// the PV and the volume directory.
func TestFilesystemVolume(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	ctx := context.Background()
	const (
		name    = "e2e-fs"
		payload = "kept on a plinth volume"
	)
	pvc := createClaim(t, c, name, corev1.PersistentVolumeFilesystem, "64Mi")

	writer := busyboxPod(name+"-writer", "echo '"+payload+"' > /data/file && sync && sleep 3600")
	mountClaim(writer, name, false)
	pv := runPod(t, c, writer, pvc)
	dir := filepath.Join(c.DataDir, "volumes", pv.Name)
	// The pod wrote through the CSI bind mount into the volume directory.
	await.For(t, t.Context(), 30*time.Second, "the pod's file in "+dir, func() (bool, error) {
		got, err := os.ReadFile(filepath.Join(dir, "file"))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return strings.TrimSpace(string(got)) == payload, err
	})

	waitCapacityMetric(t, c, pv)

	// A node without enforceable quotas says so on every filesystem claim;
	// otherwise the claim reports a plain success.
	reason, typ := provisioner.ReasonCapacityNotEnforced, corev1.EventTypeWarning
	if c.QuotaEnforced {
		reason, typ = provisioner.ReasonProvisioningSucceeded, corev1.EventTypeNormal
	}
	await.For(t, t.Context(), 30*time.Second, typ+" Event "+reason+" on claim "+name, func() (bool, error) {
		return hasEvent(ctx, c, "PersistentVolumeClaim", name, typ, reason)
	})

	// The next pod sees the data.
	deletePod(t, c.Client, "default", writer.Name)
	reader := busyboxPod(name+"-reader", "cat /data/file; sleep 3600")
	mountClaim(reader, name, false)
	runPod(t, c, reader, pvc)
	waitLogs(t, c, reader.Name, payload)

	deletePod(t, c.Client, "default", reader.Name)
	deleteClaim(t, c, pvc, pv)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory %s after the claim was deleted: %v", dir, err)
	}
}

// TestReadOnlyVolume: a claim mounted with readOnly: true is read-only in
// the pod, and the CSI plugin's own bind mount is read-only too (the
// kubelet passes the flag in NodePublishVolume), so it does not rest on the
// container runtime alone. Its capacity shows in the kubelet's metrics too.
func TestReadOnlyVolume(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	const name = "e2e-ro"
	pvc := createClaim(t, c, name, corev1.PersistentVolumeFilesystem, "16Mi")
	pod := busyboxPod(name, "if touch /data/x 2>/tmp/err; then echo WRITABLE; else cat /tmp/err; fi; sleep 3600")
	mountClaim(pod, name, true)
	pv := runPod(t, c, pod, pvc)
	waitLogs(t, c, name, "Read-only file system")
	waitCapacityMetric(t, c, pv)

	suffix := "/volumes/kubernetes.io~csi/" + pv.Name + "/mount"
	opts, err := mountOptions(suffix)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(strings.Split(opts, ","), "ro") {
		t.Errorf("CSI target *%s is mounted %q, want ro", suffix, opts)
	}
	if entries, err := os.ReadDir(filepath.Join(c.DataDir, "volumes", pv.Name)); err != nil || len(entries) != 0 {
		t.Errorf("read-only volume holds %v (%v), want nothing", entries, err)
	}

	deletePod(t, c.Client, "default", name)
	deleteClaim(t, c, pvc, pv)
	if _, err := os.Stat(filepath.Join(c.DataDir, "volumes", pv.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory of %s after the claim was deleted: %v", pv.Name, err)
	}
}

// TestBlockVolumeClaim: a raw block claim is a loop device over the
// volume's image in the pod; bytes written there land in the image and read
// back. The kubelet maps it with no losetup on its PATH (the patched
// kubelet), the only loop device over the image is the CSI plugin's, the
// kubelet's metrics show its capacity (the kubelet asks for block stats at
// a path other than the published target), and deleting the claim frees
// the device and removes the image.
func TestBlockVolumeClaim(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	const (
		name    = "e2e-blockpvc"
		payload = "raw bytes on a plinth block volume"
	)
	if _, err := os.Stat(filepath.Join(c.KubeletPATH, "losetup")); err == nil {
		t.Fatalf("losetup is on the kubelet's PATH %s", c.KubeletPATH)
	}
	pvc := createClaim(t, c, name, corev1.PersistentVolumeBlock, "16Mi")
	pod := busyboxPod(name, "printf '"+payload+"' | dd of=/dev/xvda conv=fsync 2>/dev/null && "+
		"echo; echo read back: $(dd if=/dev/xvda bs="+fmt.Sprint(len(payload))+" count=1 2>/dev/null); "+
		"while true; do echo device size: $(blockdev --getsize64 /dev/xvda); sleep 0.2; done")
	pod.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
	}}}
	pv := runPod(t, c, pod, pvc)
	waitLogs(t, c, name, "read back: "+payload)
	waitCapacityMetric(t, c, pv)
	// Grown while the pod runs: the pod sees the new device size (no
	// restart, no node step), and the PV says what the image holds.
	waitLogs(t, c, name, "device size: 16777216")
	growClaim(t, c, name, "32Mi")
	waitLogs(t, c, name, "device size: 33554432")
	grown, err := c.Client.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv = grown

	image := filepath.Join(c.DataDir, "volumes", pv.Name+".img")
	got, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, []byte(payload)) {
		t.Errorf("image %s starts with %q, want %q", image, got[:min(len(got), len(payload))], payload)
	}
	if want := pv.Spec.Capacity[corev1.ResourceStorage]; int64(len(got)) != want.Value() {
		t.Errorf("image %s holds %d bytes, want the PV's capacity %d", image, len(got), want.Value())
	}
	if loops := loopsOver(t, image); len(loops) != 1 {
		t.Errorf("loop devices over %s: %v, want exactly the CSI plugin's one", image, loops)
	}

	deletePod(t, c.Client, "default", name)
	deleteClaim(t, c, pvc, pv)
	if loops := loopsOver(t, image); len(loops) != 0 {
		t.Errorf("loop devices over %s after the claim was deleted: %v", image, loops)
	}
	if _, err := os.Stat(image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image %s after the claim was deleted: %v", image, err)
	}
}

// growClaim raises a claim's storage request and waits until the claim's
// capacity shows it.
func growClaim(t *testing.T, c *launch.Cluster, name, size string) {
	t.Helper()
	ctx := context.Background()
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("growing claim %s to %s: %v", name, size, err)
	}
	want := resource.MustParse(size)
	await.For(t, t.Context(), 30*time.Second, "claim "+name+" to have "+size, func() (bool, error) {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := pvc.Status.Capacity[corev1.ResourceStorage]
		return got.Cmp(want) == 0, fmt.Errorf("capacity %s", got.String())
	})
}

// createClaim creates a ReadWriteOnce claim of the default StorageClass.
func createClaim(t *testing.T, c *launch.Cluster, name string, mode corev1.PersistentVolumeMode, size string) *corev1.PersistentVolumeClaim {
	t.Helper()
	return claimFrom(t, c, name, mode, size, nil)
}

// claimFrom creates a ReadWriteOnce claim of the default StorageClass
// whose data source is src (none when nil): a restore or a clone.
func claimFrom(t *testing.T, c *launch.Cluster, name string, mode corev1.PersistentVolumeMode, size string, src *corev1.TypedLocalObjectReference) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &mode,
			StorageClassName: ptr(names.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			DataSource:       src,
		},
	}
	made, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(context.Background(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return made
}

// mountClaim mounts the claim at /data in the pod's container.
func mountClaim(pod *corev1.Pod, claim string, readOnly bool) {
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly},
	}}}
}

// runPod creates the pod, waits until it runs and returns the PV its
// claim is bound to (WaitForFirstConsumer: the claim binds only now).
func runPod(t *testing.T, c *launch.Cluster, pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() { deletePod(t, c.Client, "default", pod.Name) })
	if err := waitPodRunning(ctx, c.Client, "default", pod.Name, 2*time.Minute); err != nil {
		t.Fatalf("%v; claim events: %s", err, await.Events(ctx, c.Client, "default", pvc.Name))
	}
	t.Logf("pod %s with claim %s running %.1fs after creation", pod.Name, pvc.Name, time.Since(start).Seconds())
	return boundPV(t, c, pvc.Name)
}

// boundPV returns the PV the claim is bound to, which must be a Plinth
// volume.
func boundPV(t *testing.T, c *launch.Cluster, claim string) *corev1.PersistentVolume {
	t.Helper()
	ctx := context.Background()
	bound, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bound.Status.Phase != corev1.ClaimBound || bound.Spec.VolumeName == "" {
		t.Fatalf("claim %s is %s with volume %q, want Bound", claim, bound.Status.Phase, bound.Spec.VolumeName)
	}
	pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != names.DriverName {
		t.Fatalf("PV %s is not a %s volume: %+v", pv.Name, names.DriverName, pv.Spec.PersistentVolumeSource)
	}
	return pv
}

// deleteClaim deletes the claim and waits until its PV is gone: the
// provisioner deletes the volume before the PV, so the volume's data is
// gone too when this returns.
func deleteClaim(t *testing.T, c *launch.Cluster, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) {
	t.Helper()
	ctx := context.Background()
	if err := c.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting claim %s: %v", pvc.Name, err)
	}
	start := time.Now()
	await.For(t, t.Context(), time.Minute, "PV "+pv.Name+" to be deleted", func() (bool, error) {
		_, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	t.Logf("PV %s deleted %.1fs after its claim", pv.Name, time.Since(start).Seconds())
	// Deletion has its Event on the PV (searchable after the PV is gone).
	await.For(t, t.Context(), 30*time.Second, "Event "+provisioner.ReasonVolumeDeleted+" on PV "+pv.Name, func() (bool, error) {
		return hasEvent(ctx, c, "PersistentVolume", pv.Name, corev1.EventTypeNormal, provisioner.ReasonVolumeDeleted)
	})
}

// waitLogs waits until the pod's log contains want.
func waitLogs(t *testing.T, c *launch.Cluster, pod, want string) {
	t.Helper()
	var logs []byte
	await.For(t, t.Context(), 30*time.Second, fmt.Sprintf("%q in the log of pod %s", want, pod), func() (bool, error) {
		var err error
		logs, err = c.Client.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err == nil && !bytes.Contains(logs, []byte(want)) {
			err = fmt.Errorf("log is %q", logs)
		}
		return err == nil, err
	})
}

// hasEvent reports whether an Event of type and reason exists for the
// object.
func hasEvent(ctx context.Context, c *launch.Cluster, kind, name, typ, reason string) (bool, error) {
	evs, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",type=" + typ + ",reason=" + reason,
	})
	if err != nil {
		return false, err
	}
	return len(evs.Items) > 0, nil
}

// waitCapacityMetric waits until the kubelet's metrics report the PV's
// capacity for its claim. The figure comes from NodeGetVolumeStats, which
// the kubelet calls every volumeStatsAggPeriod (5s in the launched kubelet).
func waitCapacityMetric(t *testing.T, c *launch.Cluster, pv *corev1.PersistentVolume) {
	t.Helper()
	const metric = "kubelet_volume_stats_capacity_bytes"
	claim := pv.Spec.ClaimRef
	want := pv.Spec.Capacity[corev1.ResourceStorage]
	start := time.Now()
	await.For(t, t.Context(), time.Minute, metric+" of "+claim.Name, func() (bool, error) {
		v, ok, err := volumeMetric(context.Background(), c, metric, claim.Namespace, claim.Name)
		if err != nil || !ok {
			return false, err
		}
		if v != float64(want.Value()) {
			return false, fmt.Errorf("%s = %v, want %d", metric, v, want.Value())
		}
		return true, nil
	})
	t.Logf("%s of %s reported %.1fs after the pod ran", metric, claim.Name, time.Since(start).Seconds())
}

// volumeMetric reads one kubelet_volume_stats_* sample of a claim from the
// kubelet's metrics endpoint, through the apiserver's node proxy (the path
// a monitoring system uses).
func volumeMetric(ctx context.Context, c *launch.Cluster, metric, ns, claim string) (float64, bool, error) {
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", c.NodeName, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("reading kubelet metrics: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		labels, value, ok := strings.Cut(line, "} ")
		if !ok || !strings.HasPrefix(labels, metric+"{") ||
			!strings.Contains(labels, `namespace="`+ns+`"`) ||
			!strings.Contains(labels, `persistentvolumeclaim="`+claim+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			return 0, false, fmt.Errorf("parsing metric line %q: %w", line, err)
		}
		return v, true, nil
	}
	return 0, false, nil
}

// mountOptions returns the per-mount options of the one mount whose mount
// point ends in suffix, from the host's mountinfo.
func mountOptions(suffix string) (string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return "", err
	}
	var found []string
	for _, m := range mounts {
		if strings.HasSuffix(m.MountPoint, suffix) {
			found = append(found, m.Options)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("mounts ending in %s: %d (options %v), want 1", suffix, len(found), found)
	}
	return found[0], nil
}

// loopsOver lists the loop devices whose backing file is path, or was
// until it was removed.
func loopsOver(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, b := range bindings(t) {
		if b.Backing == path {
			out = append(out, b.Path())
		}
	}
	return out
}

// bindings lists the bound loop devices.
func bindings(t *testing.T) []loop.Binding {
	t.Helper()
	all, err := loop.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
