package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/launch"
)

// claimFrom creates a filesystem claim of the default class, of size,
// whose data source is kind name (in group, "" for a claim).
func claimFrom(t *testing.T, c *launch.Cluster, claim, size, group, kind, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	fs := corev1.PersistentVolumeFilesystem
	src := &corev1.TypedLocalObjectReference{Kind: kind, Name: name}
	if group != "" {
		src.APIGroup = &group
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &fs,
			StorageClassName: ptr(names.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			DataSource:       src,
		},
	}
	made, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(context.Background(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{})
	})
	return made
}

// TestRestoreHasTheSnapshotsData: a user snapshots a claim in use, its
// pod then changes the file, and a claim restored from the snapshot gives
// a new pod the file as it was when the snapshot was taken.
func TestRestoreHasTheSnapshotsData(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	ctx := t.Context()
	const name = "e2e-restore-src"
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	pvc := createClaim(t, c, name, corev1.PersistentVolumeFilesystem, "16Mi")
	writer := busyboxPod(name+"-writer", "echo before > /data/file && sync && echo written && "+
		"while [ ! -e /data/go ]; do sleep 0.2; done && echo after > /data/file && sync && echo rewritten && sleep 3600")
	mountClaim(writer, name, false)
	runPod(t, c, writer, pvc)
	podLogs(t, c, writer.Name, "written")

	createObject(t, dyn.Resource(snapshotClassGVR), map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": name}, "driver": names.DriverName, "deletionPolicy": "Delete",
	})
	snapshots := dyn.Resource(snapshotGVR).Namespace("default")
	createObject(t, snapshots, map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"volumeSnapshotClassName": name, "source": map[string]any{"persistentVolumeClaimName": name}},
	})
	// The restored claim is made at once: it waits for the snapshot.
	restored := claimFrom(t, c, "e2e-restored", "32Mi", "snapshot.storage.k8s.io", "VolumeSnapshot", name)
	await.For(t, ctx, 60*time.Second, "VolumeSnapshot "+name+" readyToUse", func() (bool, error) {
		got, err := snapshots.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		return ready, fmt.Errorf("status %v", got.Object["status"])
	})
	// The source changes after the snapshot.
	toucher := busyboxPod(name+"-go", "touch /data/go && sleep 3600")
	mountClaim(toucher, name, false)
	runPod(t, c, toucher, pvc)
	podLogs(t, c, writer.Name, "rewritten")

	reader := busyboxPod("e2e-restored-reader", "echo content=$(cat /data/file) && sleep 3600")
	mountClaim(reader, restored.Name, false)
	pv := runPod(t, c, reader, restored)
	if logs := podLogs(t, c, reader.Name, "content="); !strings.Contains(logs, "content=before") {
		t.Errorf("the restored claim's pod read %q; want the file as the snapshot has it, before", logs)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 32<<20 {
		t.Errorf("the restored PV is %s; want the claim's 32Mi", q.String())
	}
}

// TestCloneHasItsSourcesData: a user clones a claim in use (a claim whose
// dataSource is that claim) at a larger size, and a pod of the clone
// reads, from inside its container, the file the source's pod wrote; its
// PV has the clone's size, and its writes do not reach the source (a
// second pod of the source, beside the first, reads the file unchanged).
func TestCloneHasItsSourcesData(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	const src, clone = "e2e-clone-src", "e2e-clone"
	pvc := createClaim(t, c, src, corev1.PersistentVolumeFilesystem, "16Mi")
	writer := busyboxPod(src+"-writer", "echo from-the-source > /data/file && sync && echo written && sleep 3600")
	mountClaim(writer, src, false)
	runPod(t, c, writer, pvc)
	podLogs(t, c, writer.Name, "written")

	made := claimFrom(t, c, clone, "32Mi", "", "PersistentVolumeClaim", src)
	reader := busyboxPod(clone+"-reader", "echo content=$(cat /data/file) && echo changed > /data/file && sync && echo rewritten && sleep 3600")
	mountClaim(reader, clone, false)
	pv := runPod(t, c, reader, made)
	logs := podLogs(t, c, reader.Name, "rewritten")
	if !strings.Contains(logs, "content=from-the-source") {
		t.Errorf("the clone's pod read %q; want the source's file, from-the-source", logs)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 32<<20 {
		t.Errorf("the clone's PV is %s; want the claim's 32Mi", q.String())
	}
	// The source is untouched by the clone's write.
	check := busyboxPod(src+"-check", "echo source=$(cat /data/file) && sleep 3600")
	mountClaim(check, src, false)
	runPod(t, c, check, pvc)
	if logs := podLogs(t, c, check.Name, "source="); !strings.Contains(logs, "source=from-the-source") {
		t.Errorf("the source's pod reads %q after the clone was written; want from-the-source", logs)
	}
}
