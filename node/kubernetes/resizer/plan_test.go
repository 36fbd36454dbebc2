package resizer

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// claimWith is a bound claim requesting request, with capacity, and the
// given resize status and allocated size ("" for none).
func claimWith(request, capacity, allocated string, st corev1.ClaimResourceStatus) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)},
		}},
		Status: corev1.PersistentVolumeClaimStatus{
			Phase:    corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)},
		},
	}
	if allocated != "" {
		pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(allocated)}
	}
	if st != "" {
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: st}
	}
	return pvc
}

func TestPlanFollowsTheStatusProtocol(t *testing.T) {
	const (
		inProgress = corev1.PersistentVolumeClaimControllerResizeInProgress
		infeasible = corev1.PersistentVolumeClaimControllerResizeInfeasible
	)
	for _, tc := range []struct {
		name                         string
		request, capacity, allocated string
		status                       corev1.ClaimResourceStatus
		grow                         bool
		target                       string
		recovering, waiting          bool
	}{
		{name: "nothing asked", request: "1Gi", capacity: "1Gi"},
		{name: "request below capacity (rounded up earlier)", request: "1G", capacity: "1Gi"},
		{name: "new request", request: "2Gi", capacity: "1Gi", grow: true, target: "2Gi"},
		{name: "finished before, larger request now", request: "4Gi", capacity: "2Gi", allocated: "2Gi", grow: true, target: "4Gi"},
		{name: "in progress is finished at its size", request: "2Gi", capacity: "1Gi", allocated: "2Gi", status: inProgress, grow: true, target: "2Gi"},
		{name: "in progress, request lowered meanwhile: no shrink", request: "3Gi", capacity: "1Gi", allocated: "8Gi", status: inProgress, grow: true, target: "8Gi"},
		{name: "in progress, request raised meanwhile: this one first", request: "8Gi", capacity: "1Gi", allocated: "2Gi", status: inProgress, grow: true, target: "2Gi"},
		{name: "node step left by another resizer", request: "2Gi", capacity: "1Gi", allocated: "2Gi", status: corev1.PersistentVolumeClaimNodeResizePending, grow: true, target: "2Gi"},
		{name: "infeasible, request unchanged: wait for room", request: "1Ti", capacity: "1Gi", allocated: "1Ti", status: infeasible, target: "1Ti", waiting: true},
		{name: "infeasible, request lowered: recover", request: "2Gi", capacity: "1Gi", allocated: "1Ti", status: infeasible, grow: true, target: "2Gi", recovering: true},
		{name: "infeasible, request back to capacity: clear", request: "1Gi", capacity: "1Gi", allocated: "1Ti", status: infeasible, grow: true, target: "1Gi", recovering: true},
		{name: "infeasible, request raised: try it", request: "2Ti", capacity: "1Gi", allocated: "1Ti", status: infeasible, grow: true, target: "2Ti", recovering: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planFor(claimWith(tc.request, tc.capacity, tc.allocated, tc.status))
			if p.grow != tc.grow || p.recovering != tc.recovering || p.waiting != tc.waiting {
				t.Fatalf("plan = %+v, want grow=%v recovering=%v waiting=%v", p, tc.grow, tc.recovering, tc.waiting)
			}
			if tc.target != "" && p.target.Cmp(resource.MustParse(tc.target)) != 0 {
				t.Errorf("target = %s, want %s", p.target.String(), tc.target)
			}
		})
	}
}

// TestStatusSteps: the three status changes leave the claim in the states
// the protocol names, keep conditions that are not about resizing, and are
// idempotent (repeating a step changes nothing, not even a timestamp).
func TestStatusSteps(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	later := metav1.NewTime(time.Unix(2000, 0))
	pvc := claimWith("2Gi", "1Gi", "", "")
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: "Other", Status: corev1.ConditionTrue}}

	started := markInProgress(pvc, resource.MustParse("2Gi"), now)
	if pvc.Status.AllocatedResourceStatuses != nil {
		t.Fatal("markInProgress changed its argument")
	}
	if started.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimControllerResizeInProgress ||
		started.Status.AllocatedResources.Storage().String() != "2Gi" || !hasCondition(started, corev1.PersistentVolumeClaimResizing) ||
		!hasCondition(started, "Other") {
		t.Fatalf("after markInProgress: %+v", started.Status)
	}
	again := markInProgress(started, resource.MustParse("2Gi"), later)
	if again.Status.Conditions[1].LastTransitionTime != now {
		t.Errorf("repeating markInProgress moved the transition time to %v", again.Status.Conditions[1].LastTransitionTime)
	}

	failed := markInfeasible(started, "no room", now)
	if failed.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimControllerResizeInfeasible ||
		hasCondition(failed, corev1.PersistentVolumeClaimResizing) || !hasCondition(failed, corev1.PersistentVolumeClaimControllerResizeError) {
		t.Fatalf("after markInfeasible: %+v", failed.Status)
	}

	done := markFinished(started, resource.MustParse("2Gi"))
	if done.Status.AllocatedResourceStatuses != nil || hasCondition(done, corev1.PersistentVolumeClaimResizing) ||
		done.Status.Capacity.Storage().String() != "2Gi" || done.Status.AllocatedResources.Storage().String() != "2Gi" ||
		!hasCondition(done, "Other") {
		t.Fatalf("after markFinished: %+v", done.Status)
	}
	if planFor(done).grow {
		t.Error("a finished claim still plans a resize")
	}
}

func hasCondition(pvc *corev1.PersistentVolumeClaim, c corev1.PersistentVolumeClaimConditionType) bool {
	for _, x := range pvc.Status.Conditions {
		if x.Type == c {
			return true
		}
	}
	return false
}
