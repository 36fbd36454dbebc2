package controllertest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/launch"
)

// labelSnapshotManagedBy names a content's node: ownership's
// LabelSnapshotManagedBy, which this package, outside node/kubernetes,
// cannot import.
const labelSnapshotManagedBy = "snapshot.storage.kubernetes.io/managed-by"

// Snapshot is a VolumeSnapshot CreateSnapshot makes, bound to a
// pre-provisioned (static) VolumeSnapshotContent of Plinth's driver.
type Snapshot struct {
	Name string
	// Node is the content's managed-by label (none when empty).
	Node string
	// Handle is the content's snapshot handle: the engine's snapshot ID.
	Handle string
	// RestoreBytes is the content's status.restoreSize (none when zero).
	RestoreBytes int64
	// NotReady leaves the content's status.readyToUse false.
	NotReady bool
	// NodeReports leaves the content's status to the node it is
	// labelled for: a real plinth-node's snapshot controller reports a
	// pre-provisioned content (package snapshots), and would meet the
	// test's status write.
	NodeReports bool
}

// CreateSnapshot makes s as an administrator makes a static snapshot, and
// as the node's snapshot controller would report it (unless
// s.NodeReports): the content with its status (snapshot handle,
// readiness, size), then the VolumeSnapshot that names it. It waits until the snapshot-controller has bound the two. The
// control plane must serve the snapshot API (SnapshotAPI). The content is
// deleted when the test ends (its deletion policy is Retain: the engine's
// snapshot is the test's).
func (e *Env) CreateSnapshot(s Snapshot) *snapshotv1.VolumeSnapshot {
	e.T.Helper()
	ctx := context.Background()
	contentName := fmt.Sprintf("content-%s-%s", e.NS, s.Name)
	content := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: e.NS, Name: s.Name},
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentRetain,
			Driver:            names.DriverName,
			Source:            snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: &s.Handle},
		},
	}
	if s.Node != "" {
		content.Labels = map[string]string{labelSnapshotManagedBy: s.Node}
	}
	contents := e.Snapshots.SnapshotV1().VolumeSnapshotContents()
	made, err := contents.Create(ctx, content, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating VolumeSnapshotContent %s: %v", contentName, err)
	}
	e.T.Cleanup(func() { _ = contents.Delete(context.Background(), contentName, metav1.DeleteOptions{}) })
	if !s.NodeReports {
		ready := !s.NotReady
		made.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: &s.Handle, ReadyToUse: &ready}
		if s.RestoreBytes > 0 {
			made.Status.RestoreSize = &s.RestoreBytes
		}
		if _, err := contents.UpdateStatus(ctx, made, metav1.UpdateOptions{}); err != nil {
			e.T.Fatalf("setting the status of VolumeSnapshotContent %s: %v", contentName, err)
		}
	}
	snap := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: e.NS},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: &contentName}},
	}
	snaps := e.Snapshots.SnapshotV1().VolumeSnapshots(e.NS)
	if _, err := snaps.Create(ctx, snap, metav1.CreateOptions{}); err != nil {
		e.T.Fatalf("creating VolumeSnapshot %s: %v", s.Name, err)
	}
	Eventually(e.T, 30*time.Second, "VolumeSnapshot "+s.Name+" bound", func() (bool, error) {
		snap, err = snaps.Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return snap.Status != nil && snap.Status.BoundVolumeSnapshotContentName != nil, nil
	})
	return snap
}

// SnapshotAPI makes the test binary's control plane serve the snapshot
// API (the snapshot.storage.k8s.io CRDs, and the snapshot-controller that
// binds VolumeSnapshots to their contents), as every cluster test/launch
// starts does, and returns the control plane: for the tests of restores
// in a binary whose other tests do without it (WithSnapshotAPI starts it
// with the control plane). Started on first use. It needs
// the snapshot API's binaries (launch.SnapshotBinEnv, else they are
// built); the kernel-test VM has none unless that variable names them,
// and the test is skipped there.
func SnapshotAPI(t testing.TB) *launch.ControlPlane {
	t.Helper()
	cp := ControlPlane(t)
	if ktest.InVM() && os.Getenv(launch.SnapshotBinEnv) == "" {
		t.Skipf("needs the snapshot API's binaries, which the VM has only when %s names them", launch.SnapshotBinEnv)
	}
	if controlPlane.snapshots {
		return cp // WithSnapshotAPI: started with the control plane
	}
	controlPlane.lateSnapshots.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		controlPlane.lateSnapshotsErr = cp.StartSnapshotAPI(ctx)
	})
	if controlPlane.lateSnapshotsErr != nil {
		t.Fatalf("starting the snapshot API: %v", controlPlane.lateSnapshotsErr)
	}
	return cp
}
