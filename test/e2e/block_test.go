package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/pkg/loop"
)

// TestBlockVolumeWithoutLosetup maps a raw block volume into a pod while
// the kubelet has no losetup on its PATH. Upstream kubelet runs
// `losetup -f` on every block volume map (AttachFileDevice in
// MapBlockVolume) and fails the mount without it; the patched kubelet does
// not. The volume is a static local PV on a loop device, which goes through
// the same MapBlockVolume code as a CSI block volume. The pod writes to the
// device and the test reads the bytes back from the backing file.
func TestBlockVolumeWithoutLosetup(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	const (
		name    = "e2e-block"
		class   = "e2e-manual-block"
		payload = "written through a raw block volume"
	)

	backing := filepath.Join(c.DataDir, "e2e-block.img")
	f, err := os.OpenFile(backing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(backing) })
	if err := f.Truncate(16 << 20); err != nil {
		t.Fatal(err)
	}
	dev, err := loop.Create(f, loop.Options{})
	f.Close()
	if err != nil {
		t.Fatalf("creating loop device: %v", err)
	}
	t.Cleanup(func() {
		if err := dev.Remove(); err != nil {
			t.Errorf("removing %s: %v", dev.Path(), err)
		}
	})

	mode := corev1.PersistentVolumeBlock
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:                    &mode,
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dev.Path()}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{c.NodeName}}},
			}}}},
		},
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PV: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &mode,
			StorageClassName: ptr(class),
			VolumeName:       name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PVC: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	pod := busyboxPod(name, "printf '"+payload+"' | dd of=/dev/xvda conv=fsync && sleep 3600")
	pod.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
	}}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	// Registered after the PV/PVC cleanups, so it runs first: the pod must
	// be gone (volume unmapped) before the claim and device go away.
	t.Cleanup(func() { deletePod(t, c.Client, "default", name) })

	if err := waitPodRunning(ctx, c.Client, "default", name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var got []byte
	for time.Now().Before(deadline) {
		got, err = os.ReadFile(backing)
		if err == nil && bytes.HasPrefix(got, []byte(payload)) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !bytes.HasPrefix(got, []byte(payload)) {
		t.Fatalf("backing file starts with %q, want %q", got[:min(len(got), len(payload))], payload)
	}

	// The upstream kubelet would also have bound a second loop device to
	// its per-pod bind mount of the device; nothing but ours may exist.
	for _, other := range boundLoops(t, c.DataDir) {
		if other != dev.Path() {
			t.Errorf("unexpected loop device %s bound below %s", other, c.DataDir)
		}
	}
}

// boundLoops lists loop devices whose backing file is below dir or that
// back onto a device file mapped by kubelet (its volumeDevices tree).
func boundLoops(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, b := range bindings(t) {
		if strings.HasPrefix(b.Backing, dir+"/") {
			out = append(out, b.Path())
		}
	}
	return out
}
