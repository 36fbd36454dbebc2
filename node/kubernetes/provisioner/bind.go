package provisioner

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// bindClaim completes the claim's side of the binding to the PV this node
// made for it, the way the PV controller's bind does, so that the claim's
// pod does not wait for that controller: it binds with one worker for the
// whole cluster, three writes a bind, within kube-controller-manager's
// client budget (20 QPS by default), and at N = 50 claims a pod waited 5
// to 7 s for it (bench/provisioning's README has the measurements). Two
// writes, each conditional on the version it was computed from:
//
//  1. the claim: spec.volumeName and the binding annotations, which is
//     what the scheduler's binding wait ends on;
//  2. its status: Bound, with the PV's capacity and access modes, without
//     which the kubelet refuses to mount ("PVC is not bound").
//
// The PV controller then finds the claim bound to a PV whose claimRef
// names it and only writes the PV's phase.
//
// It is a shortcut, never the only way: whatever stops it (a conflict
// with the PV controller's own bind, RBAC or an admission policy that
// forbids it, a crash between the writes) leaves a claim the PV
// controller binds as it always did. So refusals are logged, not retried.
func (r *run) bindClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if pvc.Spec.VolumeName != "" || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return nil
	}
	bound, err := r.patchClaim(ctx, pvc, "", map[string]any{
		"metadata": map[string]any{
			"resourceVersion": pvc.ResourceVersion,
			"annotations":     map[string]string{ownership.AnnBindCompleted: "yes", ownership.AnnBoundByController: "yes"},
		},
		"spec": map[string]any{"volumeName": pv.Name},
	})
	if err != nil {
		return r.bindFailed(pvc, pv, "", err)
	}
	status := map[string]any{
		"phase":       corev1.ClaimBound,
		"accessModes": pv.Spec.AccessModes,
		"capacity":    pv.Spec.Capacity,
	}
	if pv.Spec.VolumeAttributesClassName != nil {
		status["currentVolumeAttributesClassName"] = *pv.Spec.VolumeAttributesClassName
	}
	done, err := r.patchClaim(ctx, bound, "status", map[string]any{
		"metadata": map[string]any{"resourceVersion": bound.ResourceVersion},
		"status":   status,
	})
	if err != nil {
		return r.bindFailed(bound, pv, "status", err)
	}
	r.log.V(1).Infof("bound claim %s to PV %s", ownership.DescribeClaim(done), pv.Name)
	return nil
}

// patchClaim merge-patches the claim (or its subresource) with patch,
// encoded as JSON, and returns the result. As with the client's own calls,
// the claim returned beside an error is not one to use.
func (r *run) patchClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, subresource string, patch map[string]any) (*corev1.PersistentVolumeClaim, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encoding claim patch: %w", err)
	}
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	return r.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, body, metav1.PatchOptions{}, sub...)
}

// bindFailed decides what a failed binding write means. A conflict or a
// claim gone means the claim changed under us, most likely bound by the PV
// controller: the informer brings the new state. A refusal (forbidden,
// invalid) is the cluster's word and the PV controller binds instead:
// logged once loudly, then quietly. Anything else is retried.
func (r *run) bindFailed(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, subresource string, err error) error {
	what := "claim"
	if subresource != "" {
		what = "claim " + subresource
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		r.log.V(1).Infof("not binding claim %s to PV %s: the %s changed meanwhile (%v)", ownership.DescribeClaim(pvc), pv.Name, what, err)
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		if r.bindRefused.CompareAndSwap(false, true) {
			r.log.Warningf("binding claim %s to PV %s refused (%v); the PV controller binds this node's claims instead, more slowly", ownership.DescribeClaim(pvc), pv.Name, err)
		} else {
			r.log.V(1).Infof("binding claim %s to PV %s refused: %v", ownership.DescribeClaim(pvc), pv.Name, err)
		}
		return nil
	}
	return fmt.Errorf("binding claim %s to PV %s (%s): %w", ownership.DescribeClaim(pvc), pv.Name, what, err)
}
