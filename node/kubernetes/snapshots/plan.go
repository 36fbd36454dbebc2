package snapshots

import (
	"fmt"
	"slices"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
)

// step is what a content asks of its node now.
type step int

const (
	// idle: nothing to do (ready, or not a content the node acts on).
	idle step = iota
	// create: make (or find again: it is idempotent) the snapshot of a
	// dynamic content's volume and record it.
	create
	// check: find the snapshot a pre-provisioned content names and
	// record it.
	check
	// settle: take off a being-created mark left by a run that stopped
	// after it recorded the snapshot.
	settle
	// release: delete the snapshot if the deletion policy says so, then
	// remove the finalizer.
	release
)

// plan is the decision for one content, from the content alone: the
// snapshot protocol's rules, as the sidecar applies them.
type plan struct {
	step step
	// remove is the snapshot a release deletes; empty when the deletion
	// policy is Retain or no snapshot was ever recorded.
	remove string
	// refusal, for a release, says why the recorded snapshot is not the
	// one this content may delete: nothing is deleted, and the finalizer
	// stays.
	refusal string
}

// planFor decides what content asks for:
//
//   - A content being deleted is released when its VolumeSnapshot is
//     being deleted too (AnnBeingDeleted, set by the snapshot-controller),
//     or when it is pre-provisioned and was never bound; never while a
//     snapshot is being made for it (AnnBeingCreated), which would leak
//     the snapshot. The snapshot deleted is the one its status records
//     (deletionPolicy Delete), and it must be the one the content names:
//     "snapshot-<UID>" of its VolumeSnapshot for a dynamic content, its
//     snapshotHandle for a pre-provisioned one.
//   - A content deleted otherwise (an administrator deleting it while its
//     VolumeSnapshot lives) is treated as alive, as the sidecar does: the
//     snapshot-controller decides when it goes.
//   - A dynamic content (source.volumeHandle) not ready is created; one
//     ready but still marked being created is settled.
//   - A pre-provisioned content (source.snapshotHandle) not ready is
//     checked.
//   - A content with neither source or both is left alone (the
//     snapshot-controller reports it).
func planFor(c *crdv1.VolumeSnapshotContent) plan {
	src := c.Spec.Source
	dynamic, static := src.VolumeHandle != nil, src.SnapshotHandle != nil
	if dynamic == static {
		return plan{}
	}
	_, beingCreated := c.Annotations[AnnBeingCreated]
	_, beingDeleted := c.Annotations[AnnBeingDeleted]
	if c.DeletionTimestamp != nil && (static && c.Spec.VolumeSnapshotRef.UID == "" || beingDeleted && !beingCreated) {
		return releasePlan(c)
	}
	switch {
	case ready(c) && beingCreated:
		return plan{step: settle}
	case ready(c):
		return plan{}
	case dynamic:
		return plan{step: create}
	}
	return plan{step: check}
}

// releasePlan is planFor's decision for a content to release.
func releasePlan(c *crdv1.VolumeSnapshotContent) plan {
	p := plan{step: release}
	if c.Spec.DeletionPolicy != crdv1.VolumeSnapshotContentDelete || c.Status == nil || c.Status.SnapshotHandle == nil {
		return p
	}
	recorded, want := *c.Status.SnapshotHandle, expectedHandle(c)
	if recorded != want {
		p.refusal = fmt.Sprintf("its status records snapshot %q, but the snapshot made for it is %q: not deleting either; "+
			"delete the snapshot by hand if it is not needed, then remove the finalizer %s", recorded, want, FinalizerBound)
		return p
	}
	p.remove = recorded
	return p
}

// expectedHandle is the snapshot a content names: the one made for its
// VolumeSnapshot (dynamic), or the one it was given (pre-provisioned).
func expectedHandle(c *crdv1.VolumeSnapshotContent) string {
	if h := c.Spec.Source.SnapshotHandle; h != nil {
		return *h
	}
	return SnapshotName(string(c.Spec.VolumeSnapshotRef.UID))
}

// SnapshotName is the engine's snapshot ID, and the CSI snapshot handle,
// of the snapshot made for the VolumeSnapshot with UID uid: the name the
// csi-snapshotter sidecar passes to CreateSnapshot, so that the node and
// any CSI caller name one snapshot the same.
func SnapshotName(uid string) string { return snapshotPrefix + uid }

// ready reports whether the content's status says its snapshot is ready.
func ready(c *crdv1.VolumeSnapshotContent) bool {
	return c.Status != nil && c.Status.ReadyToUse != nil && *c.Status.ReadyToUse
}

// hasFinalizer reports whether the content still carries FinalizerBound.
func hasFinalizer(c *crdv1.VolumeSnapshotContent) bool {
	return slices.Contains(c.Finalizers, FinalizerBound)
}
