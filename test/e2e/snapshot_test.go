package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/e2e/await"
)

// The snapshot API's resources, served by the CRDs every launched cluster
// installs. The test speaks to them through the dynamic client, as
// kubectl does, so the main module needs no snapshot client types.
var (
	snapshotClassGVR   = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
	snapshotGVR        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	snapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// managedByLabel is what the snapshot-controller, with distributed
// snapshotting on, puts on a VolumeSnapshotContent: the node that holds
// the source volume and so must take the snapshot.
const managedByLabel = "snapshot.storage.kubernetes.io/managed-by"

// sourceProtectionFinalizer is the snapshot-controller's finalizer on a
// claim while a snapshot of it is being made.
const sourceProtectionFinalizer = "snapshot.storage.kubernetes.io/pvc-as-source-protection"

// beingDeletedAnnotation is the snapshot-controller's mark on a content
// whose snapshot is deleted: the driver's side may delete it now.
const beingDeletedAnnotation = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"

// TestVolumeSnapshotGetsContent: a user who snapshots a claim of a Plinth
// volume, with a VolumeSnapshotClass of driver storage.plinth.dev, gets
// what the snapshot-controller makes in any cluster with the snapshot API:
// the snapshot bound to a new VolumeSnapshotContent of that driver, whose
// source is the claim's volume handle and which names this node as the
// one to take it; the claim is held while the snapshot is being made.
// Deleting the snapshot marks the content for deletion (the class's
// deletionPolicy) and releases the claim. Taking and deleting
// the snapshot itself, and so readyToUse, is the node's part.
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

	createObject(t, dyn.Resource(snapshotClassGVR), map[string]any{
		"apiVersion":     "snapshot.storage.k8s.io/v1",
		"kind":           "VolumeSnapshotClass",
		"metadata":       map[string]any{"name": name},
		"driver":         names.DriverName,
		"deletionPolicy": "Delete",
	})
	snapshots := dyn.Resource(snapshotGVR).Namespace("default")
	snap := createObject(t, snapshots, map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"volumeSnapshotClassName": name,
			"source":                  map[string]any{"persistentVolumeClaimName": name},
		},
	})

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
	ready, _, _ := unstructured.NestedBool(content.Object, "status", "readyToUse")
	t.Logf("content %s made; readyToUse %v", contentName, ready)

	// While the snapshot is being made, its claim cannot go away.
	claimFinalizers := func(want ...string) func() (bool, error) {
		return func() (bool, error) {
			got, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return slices.Equal(got.Finalizers, want), fmt.Errorf("finalizers %v", got.Finalizers)
		}
	}
	await.For(t, ctx, 30*time.Second, "claim "+name+" protected as the snapshot's source",
		claimFinalizers("kubernetes.io/pvc-protection", sourceProtectionFinalizer))

	// Deleting the snapshot hands the content's deletion to the driver's
	// side: the content is marked for deletion and keeps the finalizer
	// that the side which made the snapshot removes once it has deleted
	// it. Until the node does that part (issue 39), the test removes it;
	// then the snapshot and its content are gone.
	if err := snapshots.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	contents := dyn.Resource(snapshotContentGVR)
	await.For(t, ctx, 30*time.Second, "content "+contentName+" marked for deletion", func() (bool, error) {
		got, err := contents.Get(ctx, contentName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.GetDeletionTimestamp() != nil && got.GetAnnotations()[beingDeletedAnnotation] == "yes",
			fmt.Errorf("deletionTimestamp %v, annotations %v", got.GetDeletionTimestamp(), got.GetAnnotations())
	})
	if _, err := contents.Patch(ctx, contentName, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing the finalizers of content %s: %v", contentName, err)
	}
	await.For(t, ctx, 30*time.Second, "VolumeSnapshot "+name+" and content "+contentName+" deleted", func() (bool, error) {
		if _, err := contents.Get(ctx, contentName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("content still there: %v", err)
		}
		_, err := snapshots.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	await.For(t, ctx, 30*time.Second, "claim "+name+" released by the snapshot", claimFinalizers("kubernetes.io/pvc-protection"))
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
