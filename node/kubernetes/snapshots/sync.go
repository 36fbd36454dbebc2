package snapshots

import (
	"context"
	"errors"
	"fmt"
	"time"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
)

// syncContent does what content name asks of this node now (planFor). It
// is safe to run any number of times, from any point a previous run (or
// process) stopped at.
func (r *run) syncContent(ctx context.Context, name string) error {
	content, ok := r.contents.Get(name)
	if !ok {
		r.queue.Forget(name)
		return nil
	}
	if !r.ours(content) {
		return nil
	}
	switch p := planFor(content); p.step {
	case create:
		return r.createSnapshot(ctx, content)
	case check:
		return r.checkSnapshot(ctx, content)
	case settle:
		_, err := r.unmarkBeingCreated(ctx, content)
		return err
	case release:
		return r.release(ctx, content, p)
	}
	return nil
}

// createSnapshot makes the snapshot of a dynamic content's volume, as
// named steps: read its class's parameters, mark the content being
// created, copy the volume, record the snapshot in the status, take the
// mark off. A failure is recorded in the status and an Event, and retried
// with backoff.
func (r *run) createSnapshot(ctx context.Context, content *crdv1.VolumeSnapshotContent) error {
	uid := string(content.Spec.VolumeSnapshotRef.UID)
	if uid == "" {
		return r.fail(ctx, content, ReasonCreationFailed, "cannot make a snapshot for a content bound to no VolumeSnapshot (spec.volumeSnapshotRef.uid is empty)", nil)
	}
	volumeID, snapshotID := *content.Spec.Source.VolumeHandle, SnapshotName(uid)
	opts, err := r.snapshotOptions(ctx, content)
	if errors.Is(err, errBadClass) {
		return r.fail(ctx, content, ReasonCreationFailed, err.Error(), err)
	} else if err != nil {
		return err
	}
	content, err = r.markBeingCreated(ctx, content)
	if err != nil {
		return err
	}
	start := time.Now()
	snap, err := r.Volumes.CreateSnapshot(ctx, volumeID, snapshotID, opts...)
	r.Metrics.Observe(metrics.Snapshot, start, metrics.Reason(err))
	if err != nil {
		return r.createFailed(ctx, content, volumeID, err)
	}
	if content, err = r.recordSnapshot(ctx, content, snap); err != nil {
		return err
	}
	_, err = r.unmarkBeingCreated(ctx, content)
	if err == nil {
		r.log.Infof("content %s: snapshot %s of volume %s made (%d bytes to restore)", content.Name, snap.ID, volumeID, snap.SizeBytes)
	}
	return err
}

// createFailed reports a snapshot the engine did not make. The engine
// leaves nothing of a snapshot it failed to make, so the being-created
// mark comes off first: the content may go if its VolumeSnapshot does.
// When ctx has ended (the node stops) nothing can be written; the next
// run finds the mark and asks the engine again.
func (r *run) createFailed(ctx context.Context, content *crdv1.VolumeSnapshotContent, volumeID string, err error) error {
	failure := fmt.Errorf("content %s: making a snapshot of volume %s: %w", content.Name, volumeID, err)
	if ctx.Err() != nil {
		return failure
	}
	content, uerr := r.unmarkBeingCreated(ctx, content)
	if uerr != nil {
		return errors.Join(failure, uerr)
	}
	return r.fail(ctx, content, ReasonCreationFailed, r.createFailure(volumeID, err), err)
}

// createFailure says why CreateSnapshot failed, in the user's words.
func (r *run) createFailure(volumeID string, err error) string {
	if errors.Is(err, volume.ErrNotFound) {
		return fmt.Sprintf("volume %s is not on node %s (the content's %s label names this node): %v", volumeID, r.NodeName, ownership.LabelSnapshotManagedBy, err)
	}
	return fmt.Sprintf("cannot snapshot volume %s on node %s: %v", volumeID, r.NodeName, err)
}

// checkSnapshot records in a pre-provisioned content's status the
// snapshot it names, which must be on this node already.
func (r *run) checkSnapshot(ctx context.Context, content *crdv1.VolumeSnapshotContent) error {
	id := *content.Spec.Source.SnapshotHandle
	snap, err := r.Volumes.GetSnapshot(ctx, id)
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return r.fail(ctx, content, ReasonCheckFailed, fmt.Sprintf("snapshot %s is not on node %s: %v", id, r.NodeName, err), err)
	case err != nil:
		return r.fail(ctx, content, ReasonCheckFailed, fmt.Sprintf("cannot read snapshot %s on node %s: %v", id, r.NodeName, err), err)
	}
	if why := modeMismatch(content, snap); why != "" {
		return r.fail(ctx, content, ReasonCheckFailed, why, nil)
	}
	_, err = r.recordSnapshot(ctx, content, snap)
	return err
}

// modeMismatch says why snap cannot be a pre-provisioned content's
// snapshot when the content names the mode of its source
// (spec.sourceVolumeMode) and snap is of the other mode: a volume
// restored from it would not be what the VolumeSnapshot promises. (A
// dynamic content's snapshot is a copy of the volume it names, so it has
// that volume's mode.)
func modeMismatch(content *crdv1.VolumeSnapshotContent, snap volume.Snapshot) string {
	m := content.Spec.SourceVolumeMode
	if m == nil {
		return ""
	}
	want := volume.Filesystem
	if *m == corev1.PersistentVolumeBlock {
		want = volume.Block
	}
	if snap.Mode == want {
		return ""
	}
	return fmt.Sprintf("snapshot %s is of a %s volume, but the content says its source is a %s volume", snap.ID, snap.Mode, *m)
}

// release ends a content's snapshot by its deletion policy and removes
// the finalizer: the snapshot is deleted first, so that a crash between
// the steps leaves the finalizer, and the next run deletes again
// (idempotent), rather than a snapshot no content names.
func (r *run) release(ctx context.Context, content *crdv1.VolumeSnapshotContent, p plan) error {
	if p.refusal != "" {
		return r.fail(ctx, content, ReasonDeleteError, p.refusal, nil)
	}
	if p.remove != "" {
		start := time.Now()
		err := r.Volumes.DeleteSnapshot(ctx, p.remove)
		r.Metrics.Observe(metrics.SnapshotDelete, start, metrics.Reason(err))
		if err != nil {
			r.recorder.Eventf(r.ref(content), corev1.EventTypeWarning, ReasonDeleteError, "Deleting snapshot %s on node %s failed: %v (will retry)", p.remove, r.NodeName, err)
			return fmt.Errorf("deleting snapshot %s: %w", p.remove, err)
		}
		r.log.Infof("content %s: snapshot %s deleted (deletion policy Delete)", content.Name, p.remove)
	}
	return r.removeFinalizer(ctx, content)
}

// fail records why the content's snapshot is not ready in its status
// (where the snapshot-controller copies it to the VolumeSnapshot) and in
// a Warning Event on the content, and returns an error that has the
// content retried with backoff: what fails now (no room, a volume being
// made) may work later. A cause that no retry can cure, like a malformed
// content (cause nil), is not retried but on the next change.
func (r *run) fail(ctx context.Context, content *crdv1.VolumeSnapshotContent, reason, msg string, cause error) error {
	r.recorder.Event(r.ref(content), corev1.EventTypeWarning, reason, msg)
	if err := r.recordError(ctx, content, msg); err != nil {
		return err
	}
	if cause == nil {
		r.log.Warningf("content %s: %s", content.Name, msg)
		return nil
	}
	return fmt.Errorf("content %s: %s", content.Name, msg)
}

// ref is the content as the subject of an Event. An object reference
// rather than the content itself: the Event recorder finds kinds in
// client-go's scheme, which has no snapshot types.
func (r *run) ref(c *crdv1.VolumeSnapshotContent) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion:      crdv1.SchemeGroupVersion.String(),
		Kind:            "VolumeSnapshotContent",
		Name:            c.Name,
		UID:             c.UID,
		ResourceVersion: c.ResourceVersion,
	}
}
