package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/e2e/await"
)

// The snapshot API's resources, served by the CRDs every launched cluster
// installs. The test speaks to them through the dynamic client, as
// kubectl does, so the main module needs no snapshot client types.
var (
	snapshotGVR        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	snapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// managedByLabel is what the snapshot-controller, with distributed
// snapshotting on, puts on a VolumeSnapshotContent: the node that holds
// the source volume and so must take the snapshot.
const managedByLabel = "snapshot.storage.kubernetes.io/managed-by"

// TestVolumeSnapshotGetsContent: a user who snapshots a claim of a Plinth
// volume, with a VolumeSnapshotClass of driver storage.plinth.dev, gets
// what the snapshot-controller makes in any cluster with the snapshot API
// (the snapshot bound to a new VolumeSnapshotContent of that driver, whose
// source is the claim's volume handle and which names this node as the
// one to take it), and
// from the node: the snapshot made in its data directory, a copy of what
// the pod wrote, and the VolumeSnapshot readyToUse with the claim's size to
// restore. Deleting the snapshot (deletionPolicy Delete) deletes the
// node's copy, and then the VolumeSnapshot and its content are gone and
// the claim is free: nobody but the snapshot-controller and the node
// touches the content.
func TestVolumeSnapshotGetsContent(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	ctx := t.Context()
	const name = "e2e-snap"
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	pvc := createClaim(t, c, name, corev1.PersistentVolumeFilesystem, "16Mi")
	pod := busyboxPod(name+"-user", "echo data > /data/file && sleep 3600")
	mountClaim(pod, name, false)
	pv := runPod(t, c, pod, pvc)

	snap := snapshotOf(t, dyn, name, name)
	snapshots := dyn.Resource(snapshotGVR).Namespace("default")

	var contentName string
	await.For(t, ctx, 30*time.Second, "VolumeSnapshot "+name+" bound to a content", func() (bool, error) {
		got, err := snapshots.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		contentName, _, _ = unstructured.NestedString(got.Object, "status", "boundVolumeSnapshotContentName")
		return contentName != "", fmt.Errorf("status %v", got.Object["status"])
	})
	content, err := dyn.Resource(snapshotContentGVR).Get(ctx, contentName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the snapshot's content %s: %v", contentName, err)
	}
	for _, f := range []struct {
		what string
		path []string
		want string
	}{
		{"driver", []string{"spec", "driver"}, names.DriverName},
		{"source volume handle", []string{"spec", "source", "volumeHandle"}, pv.Spec.CSI.VolumeHandle},
		{"source volume mode", []string{"spec", "sourceVolumeMode"}, string(corev1.PersistentVolumeFilesystem)},
		{"class (the default)", []string{"spec", "volumeSnapshotClassName"}, names.StorageClassName},
		{"deletion policy", []string{"spec", "deletionPolicy"}, "Delete"},
		{"snapshot's namespace", []string{"spec", "volumeSnapshotRef", "namespace"}, "default"},
		{"snapshot's name", []string{"spec", "volumeSnapshotRef", "name"}, name},
		{"snapshot's uid", []string{"spec", "volumeSnapshotRef", "uid"}, string(snap.GetUID())},
		{"node (label " + managedByLabel + ")", []string{"metadata", "labels", managedByLabel}, c.NodeName},
	} {
		if got, _, _ := unstructured.NestedString(content.Object, f.path...); got != f.want {
			t.Errorf("content %s: %s is %q, want %q", contentName, f.what, got, f.want)
		}
	}
	// The node's part: the snapshot, named for the VolumeSnapshot, with
	// the pod's file in it, and the VolumeSnapshot ready.
	handle := "snapshot-" + string(snap.GetUID())
	await.For(t, ctx, 60*time.Second, "VolumeSnapshot "+name+" readyToUse", func() (bool, error) {
		got, err := snapshots.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		return ready, fmt.Errorf("status %v", got.Object["status"])
	})
	got, err := snapshots.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedString(got.Object, "status", "restoreSize"); size != "16Mi" {
		t.Errorf("VolumeSnapshot %s: restoreSize %q, want 16Mi", name, size)
	}
	if content, err = dyn.Resource(snapshotContentGVR).Get(ctx, contentName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := unstructured.NestedString(content.Object, "status", "snapshotHandle"); h != handle {
		t.Errorf("content %s: snapshotHandle %q, want %q", contentName, h, handle)
	}
	snapshotDir := filepath.Join(c.DataDir, "snapshots", handle)
	if data, err := os.ReadFile(filepath.Join(snapshotDir, "tree", "file")); err != nil || string(data) != "data\n" {
		t.Errorf("the pod's file in snapshot %s: %q, %v; want %q", handle, data, err, "data\n")
	}

	// Deleting the snapshot hands the content's deletion to the node: it
	// deletes its copy and removes the content's finalizer.
	if err := snapshots.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	contents := dyn.Resource(snapshotContentGVR)
	await.For(t, ctx, 30*time.Second, "VolumeSnapshot "+name+" and content "+contentName+" deleted", func() (bool, error) {
		if _, err := contents.Get(ctx, contentName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("content still there: %v", err)
		}
		_, err := snapshots.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if _, err := os.Stat(snapshotDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("snapshot %s after its VolumeSnapshot was deleted: %v, want it gone", snapshotDir, err)
	}
	// The claim was held while the snapshot was made (the
	// snapshot-controller's finalizer, too brief now to watch for), and
	// is released.
	await.For(t, ctx, 30*time.Second, "claim "+name+" released by the snapshot", func() (bool, error) {
		got, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return slices.Equal(got.Finalizers, []string{"kubernetes.io/pvc-protection"}), fmt.Errorf("finalizers %v", got.Finalizers)
	})
}

// createObject creates obj and deletes it when the test ends.
func createObject(t *testing.T, res dynamic.ResourceInterface, obj map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	made, err := res.Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	t.Cleanup(func() {
		if err := res.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	})
	return made
}

// snapshotOf creates VolumeSnapshot name of claim in namespace default,
// of the default VolumeSnapshotClass (the driver's, which every launched
// cluster has: clusterobjects.SnapshotClass), as a user who names no
// class does; it is deleted when the test ends.
func snapshotOf(t *testing.T, dyn dynamic.Interface, name, claim string) *unstructured.Unstructured {
	t.Helper()
	return createObject(t, dyn.Resource(snapshotGVR).Namespace("default"), map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"source": map[string]any{"persistentVolumeClaimName": claim}},
	})
}

// waitSnapshotReady waits until VolumeSnapshot name (namespace default)
// is ready to use.
func waitSnapshotReady(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string) {
	t.Helper()
	snapshots := dyn.Resource(snapshotGVR).Namespace("default")
	await.For(t, ctx, 2*time.Minute, "VolumeSnapshot "+name+" ready to use", func() (bool, error) {
		got, err := snapshots.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		return ready, fmt.Errorf("status %v", got.Object["status"])
	})
}

// snapshotSource is a claim's data source naming VolumeSnapshot name.
func snapshotSource(name string) *corev1.TypedLocalObjectReference {
	return &corev1.TypedLocalObjectReference{APIGroup: ptr(snapshotGVR.Group), Kind: "VolumeSnapshot", Name: name}
}
