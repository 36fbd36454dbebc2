package resizer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
)

// conflictRetries is how often a resize step that lost a race with another
// writer of the claim or PV (a user editing the claim, the
// kube-controller-manager annotating it) is retried at once, from a fresh
// read, before the claim goes back to the queue with backoff. Such races
// are normal at the start of every resize, and waiting out a backoff for
// them would add a quarter second to the user's wait.
const conflictRetries = 3

// syncClaim brings one claim's volume to the size its status protocol asks
// for. It is safe to run any number of times, from any point a previous
// run (or process) stopped at.
func (r *run) syncClaim(ctx context.Context, key string) error {
	for attempt := 0; ; attempt++ {
		err := r.resize(ctx, key)
		if !apierrors.IsConflict(err) || attempt == conflictRetries {
			return err
		}
		if err := r.refresh(ctx, key); err != nil {
			return err
		}
	}
}

// resize is one attempt of syncClaim, as named steps.
func (r *run) resize(ctx context.Context, key string) error {
	pvc, pv, ok := r.resolve(key)
	if !ok {
		return nil
	}
	p := planFor(pvc)
	if p.waiting && r.roomFor(ctx, pvc, pv, p.target) {
		p.grow = true
	}
	if !p.grow {
		return nil
	}
	// An attempt, counted from here. An infeasible resize is a failure
	// (Infeasible) although the key is not retried.
	start, reason := time.Now(), ""
	defer func() { r.Metrics.Observe(metrics.Resize, start, reason) }()
	pvc, err := r.startResize(ctx, pvc, pv, p)
	if err != nil {
		reason = metrics.Reason(err)
		return err
	}
	info, err := r.Volumes.Expand(ctx, pv.Name, p.target.Value())
	if err != nil {
		reason = metrics.Reason(err)
		return r.failResize(ctx, pvc, pv, p, err)
	}
	capacity := *resource.NewQuantity(info.CapacityBytes, resource.BinarySI)
	if err := r.recordVolumeSize(ctx, pv, capacity); err != nil {
		reason = metrics.Reason(err)
		return err
	}
	err = r.finishResize(ctx, pvc, pv, capacity)
	reason = metrics.Reason(err)
	return err
}

// resolve returns our bound claim with key and its PV, or ok=false when
// there is nothing for this node to do: the claim is gone, not ours, not
// bound, or its PV is not one this node provisioned. A PV that has not
// reached the cache yet queues the claim again when it does (onVolume).
func (r *run) resolve(key string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, bool) {
	pvc, ok := r.claims.Get(key)
	if !ok {
		r.queue.Forget(key)
		return nil, nil, false
	}
	if !r.bound(pvc) {
		return nil, nil, false
	}
	pv, ok := r.volumes.Get(pvc.Spec.VolumeName)
	if !ok {
		return nil, nil, false
	}
	if owns, why := ownership.OwnsVolume(pv, r.Driver, r.hostname); !owns {
		r.log.V(1).Infof("not resizing claim %s: PV %s: %s", ownership.DescribeClaim(pvc), pv.Name, why)
		return nil, nil, false
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return nil, nil, false
	}
	return pvc, pv, true
}

// startResize records in the claim that its volume grows to the plan's
// target, before the volume does: after a crash, that record is what
// makes the next run finish this resize rather than start another.
func (r *run) startResize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, p plan) (*corev1.PersistentVolumeClaim, error) {
	updated, changed, err := r.patchClaimStatus(ctx, pvc, markInProgress(pvc, p.target, metav1.NewTime(r.clock.Now())))
	if err != nil {
		return nil, fmt.Errorf("marking the resize of claim %s to %s: %w", ownership.DescribeClaim(pvc), p.target.String(), err)
	}
	if changed {
		from := pvc.Status.Capacity[corev1.ResourceStorage]
		if p.waiting {
			r.recorder.Eventf(pvc, corev1.EventTypeNormal, ReasonResizing,
				"Node %s has room now: growing volume %s from %s to %s", r.NodeName, pv.Name, from.String(), p.target.String())
		} else if p.recovering {
			r.recorder.Eventf(pvc, corev1.EventTypeNormal, ReasonResizing,
				"The request changed after a failed resize: growing volume %s from %s to %s instead", pv.Name, from.String(), p.target.String())
		} else {
			r.recorder.Eventf(pvc, corev1.EventTypeNormal, ReasonResizing,
				"Growing volume %s from %s to %s on node %s", pv.Name, from.String(), p.target.String(), r.NodeName)
		}
	}
	return updated, nil
}

// failResize reports a failed Expand. An infeasible one (not enough space,
// a size over the limit) is recorded as ControllerResizeInfeasible and not
// retried with backoff: the user may change the request, lower it too, and
// the resizer tries the same request again once the node has room for it
// (roomFor). Any other failure is retried with backoff.
func (r *run) failResize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, p plan, err error) error {
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	if !volume.Infeasible(err) {
		r.recorder.Eventf(pvc, corev1.EventTypeWarning, ReasonResizeFailed,
			"Growing to %s failed: %v (will retry)", p.target.String(), err)
		return err
	}
	// The API server takes a lowered request only above the capacity
	// (v1.34 refuses one equal to it), so that is what the hint says.
	msg := fmt.Sprintf("Cannot grow to %s on node %s: %v. Lower the request (to more than %s) to recover; the resize is tried again when the node has room for it.",
		p.target.String(), r.NodeName, err, capacity.String())
	if _, _, perr := r.patchClaimStatus(ctx, pvc, markInfeasible(pvc, msg, metav1.NewTime(r.clock.Now()))); perr != nil {
		return fmt.Errorf("marking the resize of claim %s infeasible: %w", ownership.DescribeClaim(pvc), perr)
	}
	r.log.Warningf("claim %s: %s", ownership.DescribeClaim(pvc), msg)
	r.recorder.Event(pvc, corev1.EventTypeWarning, ReasonResizeFailed, msg)
	return nil
}

// roomFor reports whether the node could now grow the claim's volume to
// target, by the accounting Expand checks (expansions never over-commit),
// for an infeasible resize waiting for room (plan.waiting). A resize that
// failed for another reason (a size over the limit, filesystem volumes
// refused where quotas are not enforced) never has room, so it is not
// tried again until the request changes.
func (r *run) roomFor(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, target resource.Quantity) bool {
	if reason, allowed := r.Volumes.UnenforcedCapacity(); reason != nil && !allowed &&
		(pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode == corev1.PersistentVolumeFilesystem) {
		return false
	}
	if target.Value() > volume.MaxBytes {
		return false
	}
	space, err := r.Volumes.Space(ctx)
	if err != nil {
		r.log.Warningf("claim %s: measuring the room for its resize: %v", ownership.DescribeClaim(pvc), err)
		return false
	}
	held := pv.Spec.Capacity[corev1.ResourceStorage]
	return target.Value()-held.Value() <= space.Available(volume.NoOvercommit)
}

// recordVolumeSize sets the PV's capacity to what the volume now holds.
func (r *run) recordVolumeSize(ctx context.Context, pv *corev1.PersistentVolume, capacity resource.Quantity) error {
	if cur, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok && cur.Cmp(capacity) >= 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": pv.ResourceVersion},
		"spec":     map[string]any{"capacity": corev1.ResourceList{corev1.ResourceStorage: capacity}},
	})
	if err != nil {
		return fmt.Errorf("encoding PV patch: %w", err)
	}
	updated, err := r.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("recording capacity %s in PV %s: %w", capacity.String(), pv.Name, err)
	}
	r.volumes.Remember(updated)
	return nil
}

// finishResize records the claim's new capacity and ends the resize.
func (r *run) finishResize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, capacity resource.Quantity) error {
	_, changed, err := r.patchClaimStatus(ctx, pvc, markFinished(pvc, capacity))
	if err != nil {
		return fmt.Errorf("recording capacity %s in claim %s: %w", capacity.String(), ownership.DescribeClaim(pvc), err)
	}
	if !changed {
		return nil
	}
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	r.log.Infof("claim %s: volume %s now holds %s", ownership.DescribeClaim(pvc), pv.Name, capacity.String())
	if capacity.Cmp(request) > 0 && capacity.Value()-request.Value() >= volume.Alignment {
		// The user lowered the request while a larger resize was under
		// way; that one was finished, since volumes never shrink.
		r.recorder.Eventf(pvc, corev1.EventTypeNormal, ReasonResizeSuccess,
			"Volume %s holds %s, more than the %s requested now: a resize to %s was under way, and a volume never shrinks",
			pv.Name, capacity.String(), request.String(), capacity.String())
		return nil
	}
	r.recorder.Eventf(pvc, corev1.EventTypeNormal, ReasonResizeSuccess,
		"Volume %s now holds %s; its pods see the new size", pv.Name, capacity.String())
	return nil
}

// patchClaimStatus writes the status of want over that of have, through
// the status subresource, with have's resourceVersion as precondition: a
// claim changed meanwhile fails with a Conflict instead of being
// overwritten. changed is false when there was nothing to write.
func (r *run) patchClaimStatus(ctx context.Context, have, want *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, bool, error) {
	if equality.Semantic.DeepEqual(have.Status, want.Status) {
		return have, false, nil
	}
	old, err := json.Marshal(corev1.PersistentVolumeClaim{Status: have.Status})
	if err != nil {
		return nil, false, fmt.Errorf("encoding claim status: %w", err)
	}
	cur, err := json.Marshal(corev1.PersistentVolumeClaim{Status: want.Status})
	if err != nil {
		return nil, false, fmt.Errorf("encoding claim status: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(old, cur, corev1.PersistentVolumeClaim{})
	if err != nil {
		return nil, false, fmt.Errorf("computing claim status patch: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, false, fmt.Errorf("decoding claim status patch: %w", err)
	}
	m["metadata"] = map[string]any{"resourceVersion": have.ResourceVersion}
	if patch, err = json.Marshal(m); err != nil {
		return nil, false, fmt.Errorf("encoding claim status patch: %w", err)
	}
	updated, err := r.Client.CoreV1().PersistentVolumeClaims(have.Namespace).Patch(ctx, have.Name,
		types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, false, err
	}
	r.claims.Remember(updated)
	return updated, true, nil
}

// refresh reads the claim with key and its PV from the API server, after
// a conflict showed the cached copies to be stale.
func (r *run) refresh(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	pvc, err := r.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading claim %s: %w", key, err)
	}
	r.claims.Remember(pvc)
	if pvc.Spec.VolumeName == "" {
		return nil
	}
	pv, err := r.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading PV %s: %w", pvc.Spec.VolumeName, err)
	}
	r.volumes.Remember(pv)
	return nil
}
