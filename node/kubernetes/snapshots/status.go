package snapshots

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/core/volume"
)

// The writes of the controller, each one merge patch of the content. The
// patches of annotations and of the status name only what they change, so
// they need no precondition: nobody else writes these fields. The
// finalizers are a list, replaced whole by a merge patch, so that patch
// carries the resourceVersion it was computed from.

// markBeingCreated puts AnnBeingCreated on the content, before its
// snapshot is made: the snapshot-controller then keeps the content until
// the mark is gone, so a snapshot being made is never left without one.
func (r *run) markBeingCreated(ctx context.Context, c *crdv1.VolumeSnapshotContent) (*crdv1.VolumeSnapshotContent, error) {
	if _, ok := c.Annotations[AnnBeingCreated]; ok {
		return c, nil
	}
	return r.patch(ctx, c, "marking it being created", map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnBeingCreated: "yes"}},
	})
}

// unmarkBeingCreated takes AnnBeingCreated off once the engine has
// answered: the snapshot is recorded, or there is none.
func (r *run) unmarkBeingCreated(ctx context.Context, c *crdv1.VolumeSnapshotContent) (*crdv1.VolumeSnapshotContent, error) {
	if _, ok := c.Annotations[AnnBeingCreated]; !ok {
		return c, nil
	}
	return r.patch(ctx, c, "removing its being-created mark", map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnBeingCreated: nil}},
	})
}

// recordSnapshot writes snap into the content's status: its handle (the
// engine's ID), ready, the size a restored volume needs, and when it was
// made, in nanoseconds as the API has it; and clears an earlier error.
func (r *run) recordSnapshot(ctx context.Context, c *crdv1.VolumeSnapshotContent, snap volume.Snapshot) (*crdv1.VolumeSnapshotContent, error) {
	return r.patch(ctx, c, "recording snapshot "+snap.ID, map[string]any{"status": map[string]any{
		"snapshotHandle": snap.ID,
		"readyToUse":     snap.ReadyToUse,
		"restoreSize":    snap.SizeBytes,
		"creationTime":   snap.CreatedAt.UnixNano(),
		"error":          nil,
	}}, "status")
}

// recordError writes msg as the content's status.error, with readyToUse
// false, unless that is what the status says already (a retry of the
// same failure writes nothing).
func (r *run) recordError(ctx context.Context, c *crdv1.VolumeSnapshotContent, msg string) error {
	if s := c.Status; s != nil && s.Error != nil && s.Error.Message != nil && *s.Error.Message == msg &&
		s.ReadyToUse != nil && !*s.ReadyToUse {
		return nil
	}
	_, err := r.patch(ctx, c, "recording its error", map[string]any{"status": map[string]any{
		"readyToUse": false,
		"error":      map[string]any{"time": metav1.NewTime(r.Clock.Now()), "message": msg},
	}}, "status")
	return err
}

// removeFinalizer takes FinalizerBound off the content, keeping any other
// finalizer, so that the snapshot-controller can finish its deletion.
func (r *run) removeFinalizer(ctx context.Context, c *crdv1.VolumeSnapshotContent) error {
	if !hasFinalizer(c) {
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(c.Finalizers), func(f string) bool { return f == FinalizerBound })
	_, err := r.patch(ctx, c, "removing its finalizer", map[string]any{
		"metadata": map[string]any{"resourceVersion": c.ResourceVersion, "finalizers": rest},
	})
	return err
}

// patch applies the merge patch p to content c (to its subresource, if
// one is named), remembers the result, and returns it.
func (r *run) patch(ctx context.Context, c *crdv1.VolumeSnapshotContent, what string, p map[string]any, subresource ...string) (*crdv1.VolumeSnapshotContent, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("content %s: %s: encoding the patch: %w", c.Name, what, err)
	}
	updated, err := r.Snapshots.SnapshotV1().VolumeSnapshotContents().Patch(ctx, c.Name, types.MergePatchType, data, metav1.PatchOptions{}, subresource...)
	if err != nil {
		return nil, fmt.Errorf("content %s: %s: %w", c.Name, what, err)
	}
	r.contents.Remember(updated)
	return updated, nil
}
