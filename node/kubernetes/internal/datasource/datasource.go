// Package datasource finds what a claim's volume is to be copied from:
// the VolumeSnapshot or the claim its dataSource (or dataSourceRef) names,
// the node that holds it and the engine's name of it. The placer reads it
// to put the claim on that node; the node's provisioner reads it again to
// make the copy there. It reads the API server, never a cache: a source is
// looked at once per claim, and what is read decides where data is copied
// from.
//
// The conventions it reads (fixed for all of Plinth):
//   - a VolumeSnapshot's data is its bound VolumeSnapshotContent's; the
//     content's status.snapshotHandle IS the engine's snapshot ID, and the
//     node that holds it is the content's managed-by label (the
//     snapshot-controller sets it for a dynamic snapshot, the admin for a
//     static one);
//   - a claim's data is its PV's volume, the volume handle the engine's
//     volume ID, on the node named by the PV's ownership.AnnNodeName
//     annotation (which the admission policies let a node write only with
//     its own name).
package datasource

import (
	"context"
	"errors"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// The errors of Resolve, by what the caller does about them.
var (
	// ErrNotReady: the source exists but cannot be copied yet (a
	// snapshot not ready to use, a claim not bound); wait and look again.
	ErrNotReady = errors.New("not ready yet")
	// ErrUnusable: the claim cannot be made from the source as things
	// are (missing, another driver's, on no node, of a kind Plinth does
	// not copy); the user must change something.
	ErrUnusable = errors.New("cannot be copied")
)

// Kind is what a source is.
type Kind int

const (
	// Snapshot is a VolumeSnapshot: the claim is a restore.
	Snapshot Kind = iota + 1
	// Volume is another claim: the claim is a clone.
	Volume
)

// Source is a resolved data source.
type Source struct {
	Kind Kind
	// Name describes the source to users: "VolumeSnapshot ns/name".
	Name string
	// Node holds the source's data.
	Node string
	// Handle is the engine's ID: a snapshot ID or a volume ID.
	Handle string
	// Bytes is the source's size: a copy must be at least as large.
	// Zero when the source does not say (a content without restoreSize).
	Bytes int64
	// Mode is a source volume's mode; empty for a snapshot, whose mode
	// only the engine knows.
	Mode corev1.PersistentVolumeMode
}

// Ref returns the claim's data source: dataSourceRef, or dataSource if it
// is not set (the API server keeps the two equal when both are).
func Ref(pvc *corev1.PersistentVolumeClaim) *corev1.TypedObjectReference {
	if r := pvc.Spec.DataSourceRef; r != nil {
		return r
	}
	if r := pvc.Spec.DataSource; r != nil {
		return &corev1.TypedObjectReference{APIGroup: r.APIGroup, Kind: r.Kind, Name: r.Name}
	}
	return nil
}

// Check says whether the claim's data source is of a kind Plinth copies
// (a VolumeSnapshot or a claim of the same namespace); nil when it is, or
// when the claim has none. Its error wraps ErrUnusable.
func Check(pvc *corev1.PersistentVolumeClaim) error {
	ref := Ref(pvc)
	if ref == nil {
		return nil
	}
	if ref.Namespace != nil && *ref.Namespace != "" && *ref.Namespace != pvc.Namespace {
		return fmt.Errorf("%w: the data source is in namespace %q; only sources of the claim's own namespace are copied", ErrUnusable, *ref.Namespace)
	}
	switch group(ref) {
	case snapshotv1.GroupName + "/VolumeSnapshot", "/PersistentVolumeClaim":
		return nil
	}
	return fmt.Errorf("%w: data source %s %q is neither a VolumeSnapshot (%s) nor a PersistentVolumeClaim (volume populators are not supported)",
		ErrUnusable, ref.Kind, ref.Name, snapshotv1.GroupName)
}

func group(ref *corev1.TypedObjectReference) string {
	g := ""
	if ref.APIGroup != nil {
		g = *ref.APIGroup
	}
	return g + "/" + ref.Kind
}

// Clients reads sources.
type Clients struct {
	Core      kubernetes.Interface
	Snapshots snapclient.Interface
}

// Resolve finds the claim's data source, for a volume of driver. A claim
// without one is (nil, nil). Its errors wrap ErrNotReady, ErrUnusable,
// or neither (the API server could not be read: retry).
func Resolve(ctx context.Context, c Clients, driver string, pvc *corev1.PersistentVolumeClaim) (*Source, error) {
	if err := Check(pvc); err != nil {
		return nil, err
	}
	ref := Ref(pvc)
	switch {
	case ref == nil:
		return nil, nil
	case ref.Kind == "VolumeSnapshot":
		return resolveSnapshot(ctx, c, driver, pvc.Namespace, ref.Name)
	}
	return resolveClaim(ctx, c, driver, pvc, ref.Name)
}

// resolveSnapshot finds VolumeSnapshot ns/name's content.
func resolveSnapshot(ctx context.Context, c Clients, driver, ns, name string) (*Source, error) {
	desc := fmt.Sprintf("VolumeSnapshot %s/%s", ns, name)
	if c.Snapshots == nil {
		return nil, fmt.Errorf("%w: %s: no client of the snapshot API", ErrUnusable, desc)
	}
	snap, err := c.Snapshots.SnapshotV1().VolumeSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, readError(desc, err)
	}
	if snap.Status == nil || snap.Status.BoundVolumeSnapshotContentName == nil || *snap.Status.BoundVolumeSnapshotContentName == "" {
		return nil, fmt.Errorf("%s: %w: it is bound to no VolumeSnapshotContent", desc, ErrNotReady)
	}
	contentName := *snap.Status.BoundVolumeSnapshotContentName
	content, err := c.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
	if err != nil {
		return nil, readError(fmt.Sprintf("%s: its VolumeSnapshotContent %s", desc, contentName), err)
	}
	ref := content.Spec.VolumeSnapshotRef
	switch {
	case content.Spec.Driver != driver:
		return nil, fmt.Errorf("%w: %s is a snapshot of driver %q, not %q", ErrUnusable, desc, content.Spec.Driver, driver)
	case ref.Namespace != ns || ref.Name != name || (ref.UID != "" && ref.UID != snap.UID):
		// A snapshot's status names a content that is not its own.
		return nil, fmt.Errorf("%w: %s names VolumeSnapshotContent %s, which is bound to %s/%s", ErrUnusable, desc, contentName, ref.Namespace, ref.Name)
	case content.DeletionTimestamp != nil || snap.DeletionTimestamp != nil:
		return nil, fmt.Errorf("%w: %s is being deleted", ErrUnusable, desc)
	}
	node := content.Labels[ownership.LabelSnapshotManagedBy]
	if node == "" {
		return nil, fmt.Errorf("%w: %s: its VolumeSnapshotContent %s names no node (label %s)", ErrUnusable, desc, contentName, ownership.LabelSnapshotManagedBy)
	}
	st := content.Status
	if st == nil || st.ReadyToUse == nil || !*st.ReadyToUse || st.SnapshotHandle == nil || *st.SnapshotHandle == "" {
		return nil, fmt.Errorf("%s: %w: its VolumeSnapshotContent %s is not ready to use", desc, ErrNotReady, contentName)
	}
	s := &Source{Kind: Snapshot, Name: desc, Node: node, Handle: *st.SnapshotHandle}
	if st.RestoreSize != nil {
		s.Bytes = *st.RestoreSize
	}
	return s, nil
}

// resolveClaim finds the volume of claim name, in pvc's namespace.
func resolveClaim(ctx context.Context, c Clients, driver string, pvc *corev1.PersistentVolumeClaim, name string) (*Source, error) {
	desc := fmt.Sprintf("PersistentVolumeClaim %s/%s", pvc.Namespace, name)
	if name == pvc.Name {
		return nil, fmt.Errorf("%w: a claim cannot be a clone of itself", ErrUnusable)
	}
	src, err := c.Core.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, readError(desc, err)
	}
	switch {
	case src.DeletionTimestamp != nil:
		return nil, fmt.Errorf("%w: %s is being deleted", ErrUnusable, desc)
	case className(src) != className(pvc):
		// As CSI provisioners require: a clone is of its source's class.
		return nil, fmt.Errorf("%w: %s is of StorageClass %q, not the claim's %q", ErrUnusable, desc, className(src), className(pvc))
	case src.Spec.VolumeName == "":
		return nil, fmt.Errorf("%s: %w: it is not bound to a volume", desc, ErrNotReady)
	}
	pv, err := c.Core.CoreV1().PersistentVolumes().Get(ctx, src.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return nil, readError(fmt.Sprintf("%s: its PV %s", desc, src.Spec.VolumeName), err)
	}
	csi := pv.Spec.CSI
	switch {
	case csi == nil || csi.Driver != driver || pv.Annotations[ownership.AnnProvisionedBy] != driver:
		return nil, fmt.Errorf("%w: %s is not a volume of driver %q", ErrUnusable, desc, driver)
	case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != src.UID:
		return nil, fmt.Errorf("%s: %w: its PV %s is not bound to it yet", desc, ErrNotReady, pv.Name)
	case pv.Annotations[ownership.AnnNodeName] == "":
		return nil, fmt.Errorf("%w: %s: its PV %s names no node (annotation %s)", ErrUnusable, desc, pv.Name, ownership.AnnNodeName)
	}
	mode := corev1.PersistentVolumeFilesystem
	if pv.Spec.VolumeMode != nil {
		mode = *pv.Spec.VolumeMode
	}
	s := &Source{Kind: Volume, Name: desc, Node: pv.Annotations[ownership.AnnNodeName], Handle: csi.VolumeHandle, Mode: mode}
	if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
		s.Bytes = q.Value()
	}
	return s, nil
}

func className(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.StorageClassName == nil {
		return ""
	}
	return *pvc.Spec.StorageClassName
}

// readError classifies a failed read of the source: not found is
// ErrUnusable (until it is made), anything else is returned to retry.
func readError(desc string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s does not exist", ErrUnusable, desc)
	}
	return fmt.Errorf("reading %s: %w", desc, err)
}
