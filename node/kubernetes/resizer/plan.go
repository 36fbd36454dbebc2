package resizer

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The claim status protocol of volume expansion with recovery from failure
// (KEP-1790, RecoverVolumeExpansionFailure, GA in Kubernetes 1.34), as
// kubernetes-csi/external-resizer speaks it and kubectl, the kubelet and
// the ResourceQuota admission read it:
//
//   - status.allocatedResources["storage"] is the size the controller is
//     growing the volume to (quota counts the larger of it and the request,
//     so a failed expansion cannot be used to get around a quota);
//   - status.allocatedResourceStatuses["storage"] is ControllerResizeInProgress
//     while the controller works, ControllerResizeInfeasible when the
//     request cannot be met, and absent once the claim has its size;
//   - the Resizing condition is true while a resize is under way, and a
//     ControllerResizeError condition explains an infeasible one;
//   - the PV's spec.capacity is the size the volume holds, and finally the
//     claim's status.capacity is the size its user may count on.
//
// Plinth needs no node-side step: a filesystem volume's quota is its size,
// and the volume layer refreshes the loop devices of a block volume itself.
// So the controller never sets NodeResizePending, and the kubelet never
// calls NodeExpandVolume.

// plan is what the resizer does for a bound claim.
type plan struct {
	// grow is false when there is nothing to do.
	grow bool
	// target is the size to reach.
	target resource.Quantity
	// recovering is true when the user changed the request of an
	// infeasible resize (recovery from expansion failure).
	recovering bool
	// waiting is true for an infeasible resize whose request is still
	// the one that failed: grow is false, and target is that request,
	// which the resizer tries again once the node has room for it.
	waiting bool
}

// planFor decides, from the claim and its PV, the size to grow the volume
// to. The rules, in order:
//
//  1. A resize under way (ControllerResizeInProgress, or a node status
//     left by another resizer) is finished at its allocated size, whatever
//     the request says now: the volume may already have that size (a crash
//     after growing it, before recording that), and a volume never
//     shrinks, so the only safe end is the size once promised. A larger
//     request is handled after it by rule 3.
//  2. An infeasible resize (ControllerResizeInfeasible) waits while the
//     request stays what failed: the resizer tries it again only once
//     the node has room for it (roomFor), never in a loop. When the user
//     changes the request, the new one is tried, even when it is lower
//     than the one that failed (above the capacity, which the API server
//     enforces): that is how a user recovers from asking for too much.
//  3. Otherwise a request above the claim's capacity is grown to.
func planFor(pvc *corev1.PersistentVolumeClaim) plan {
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	allocated, hasAllocated := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	switch pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] {
	case corev1.PersistentVolumeClaimControllerResizeInProgress,
		corev1.PersistentVolumeClaimNodeResizePending,
		corev1.PersistentVolumeClaimNodeResizeInProgress,
		corev1.PersistentVolumeClaimNodeResizeInfeasible:
		if hasAllocated {
			return plan{grow: true, target: allocated}
		}
	case corev1.PersistentVolumeClaimControllerResizeInfeasible:
		if hasAllocated && request.Cmp(allocated) == 0 {
			return plan{waiting: true, target: allocated}
		}
		target := request
		if target.Cmp(capacity) < 0 {
			target = capacity
		}
		return plan{grow: true, target: target, recovering: true}
	}
	if request.Cmp(capacity) > 0 {
		return plan{grow: true, target: request}
	}
	return plan{}
}

// Status changes. Each returns a changed copy of the claim and leaves the
// argument alone, so that a patch can be computed between the two.

// markInProgress records that the controller grows the volume to target.
func markInProgress(pvc *corev1.PersistentVolumeClaim, target resource.Quantity, now metav1.Time) *corev1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	setStorageStatus(c, corev1.PersistentVolumeClaimControllerResizeInProgress)
	if c.Status.AllocatedResources == nil {
		c.Status.AllocatedResources = corev1.ResourceList{}
	}
	c.Status.AllocatedResources[corev1.ResourceStorage] = target
	c.Status.Conditions = withResizeConditions(c.Status.Conditions, corev1.PersistentVolumeClaimCondition{
		Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue, LastTransitionTime: now,
	})
	return c
}

// markInfeasible records that the resize to the allocated size cannot be
// done, and why.
func markInfeasible(pvc *corev1.PersistentVolumeClaim, message string, now metav1.Time) *corev1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	setStorageStatus(c, corev1.PersistentVolumeClaimControllerResizeInfeasible)
	c.Status.Conditions = withResizeConditions(c.Status.Conditions, corev1.PersistentVolumeClaimCondition{
		Type: corev1.PersistentVolumeClaimControllerResizeError, Status: corev1.ConditionTrue,
		LastTransitionTime: now, Message: message,
	})
	return c
}

// markFinished records that the claim has capacity: the resize status and
// the resize conditions go.
func markFinished(pvc *corev1.PersistentVolumeClaim, capacity resource.Quantity) *corev1.PersistentVolumeClaim {
	c := pvc.DeepCopy()
	if c.Status.Capacity == nil {
		c.Status.Capacity = corev1.ResourceList{}
	}
	c.Status.Capacity[corev1.ResourceStorage] = capacity
	delete(c.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
	if len(c.Status.AllocatedResourceStatuses) == 0 {
		c.Status.AllocatedResourceStatuses = nil
	}
	c.Status.Conditions = withResizeConditions(c.Status.Conditions)
	return c
}

func setStorageStatus(c *corev1.PersistentVolumeClaim, s corev1.ClaimResourceStatus) {
	if c.Status.AllocatedResourceStatuses == nil {
		c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] = s
}

// resizeConditions are the claim conditions that describe a resize; a new
// resize state replaces all of them.
var resizeConditions = map[corev1.PersistentVolumeClaimConditionType]bool{
	corev1.PersistentVolumeClaimResizing:                true,
	corev1.PersistentVolumeClaimFileSystemResizePending: true,
	corev1.PersistentVolumeClaimControllerResizeError:   true,
	corev1.PersistentVolumeClaimNodeResizeError:         true,
}

// withResizeConditions returns conds with every resize condition replaced
// by set. A condition of set that is already present with the same status
// keeps its transition time, so repeating a step changes nothing.
func withResizeConditions(conds []corev1.PersistentVolumeClaimCondition, set ...corev1.PersistentVolumeClaimCondition) []corev1.PersistentVolumeClaimCondition {
	var out []corev1.PersistentVolumeClaimCondition
	old := map[corev1.PersistentVolumeClaimConditionType]corev1.PersistentVolumeClaimCondition{}
	for _, c := range conds {
		if resizeConditions[c.Type] {
			old[c.Type] = c
			continue
		}
		out = append(out, c)
	}
	for _, c := range set {
		if o, ok := old[c.Type]; ok && o.Status == c.Status && o.Message == c.Message {
			c.LastTransitionTime = o.LastTransitionTime
		}
		out = append(out, c)
	}
	return out
}
