package provisioner

// The invariants TestCrashSafety checks once the kills stop, and the
// settle that waits for them.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// settle marks newly bound claims and checks the invariants every second
// until done accepts the violations or timeout passes, and returns the
// last violations.
func (r *crashRun) settle(t *testing.T, timeout time.Duration, done func(violations) bool) violations {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// Nothing settles without the node: say so, not what it left undone.
		if !r.node.Running() {
			t.Fatalf("plinth-node exited during the settle")
		}
		r.mark(t)
		placing := r.placeHandedBack(t)
		v := r.check(t)
		v.other = append(v.other, placing...)
		if done(v) || time.Now().After(deadline) {
			return v
		}
		time.Sleep(time.Second)
	}
}

// violations are the crash-safety invariants a check found broken.
type violations struct {
	leaks []string // volumes no PV and no claim refers to, sorted
	state []string // volume layer state no volume accounts for (countState)
	lost  []string // markers in bound volumes gone or changed
	other []string
}

func (v violations) none() bool { return len(v.leaks)+len(v.state)+len(v.lost)+len(v.other) == 0 }
func (v violations) all() []string {
	return slices.Concat(v.lost, v.leaks, v.state, v.other)
}

// check returns the violations of the crash-safety invariants.
func (r *crashRun) check(t *testing.T) violations {
	t.Helper()
	ctx := context.Background()
	var v violations
	pvs, err := r.nodePVs(ctx)
	if err != nil {
		return violations{other: []string{err.Error()}}
	}
	entries, err := r.e.Vols.List(ctx)
	if err != nil {
		return violations{other: []string{err.Error()}}
	}
	sc, err := countState(ctx, r.e.Vols, entries, r.quotaBaseline)
	if err != nil {
		return violations{other: []string{err.Error()}}
	}
	r.state, v.state = sc, sc.leaks
	volumes := map[string]int{}
	for _, en := range entries {
		if en.Pending != "" || en.Problem != "" {
			v.other = append(v.other, fmt.Sprintf("volume %q (%s): pending %q, problem %q", en.ID, en.Name, en.Pending, en.Problem))
		}
		volumes[en.ID]++
	}
	liveUIDs := map[types.UID]*corev1.PersistentVolumeClaim{}
	for _, pvc := range r.live {
		liveUIDs[pvc.UID] = pvc
	}
	claimsWithPV := map[types.UID]int{}
	for name, pv := range pvs {
		if volumes[name] == 0 {
			v.other = append(v.other, fmt.Sprintf("PV %s (%s) has no volume", name, pv.Status.Phase))
		}
		if pv.Spec.ClaimRef != nil {
			claimsWithPV[pv.Spec.ClaimRef.UID]++
		}
	}
	for id, n := range volumes {
		if n > 1 {
			v.other = append(v.other, fmt.Sprintf("volume %s listed %d times", id, n))
		}
		uid, _ := ownership.ClaimUIDOf(id)
		if pvs[id] == nil && liveUIDs[uid] == nil {
			v.leaks = append(v.leaks, fmt.Sprintf("leaked volume %s: no PV, no claim", id))
		}
	}
	slices.Sort(v.leaks)
	for uid, n := range claimsWithPV {
		if n > 1 {
			v.other = append(v.other, fmt.Sprintf("claim %s has %d PVs", uid, n))
		}
		if liveUIDs[uid] == nil {
			v.other = append(v.other, fmt.Sprintf("PV of deleted claim %s still exists", uid))
		}
	}
	for _, pvc := range r.live {
		cur, err := r.client.CoreV1().PersistentVolumeClaims(r.e.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			v.other = append(v.other, fmt.Sprintf("claim %s vanished", pvc.Name))
			continue
		case err != nil:
			v.other = append(v.other, err.Error())
			continue
		case cur.Status.Phase != corev1.ClaimBound:
			v.other = append(v.other, fmt.Sprintf("claim %s is %s", pvc.Name, cur.Status.Phase))
		}
		if n := volumes[ownership.VolumeIDFor(pvc.UID)]; n != 1 {
			v.other = append(v.other, fmt.Sprintf("claim %s has %d volumes", pvc.Name, n))
		}
		if _, marked := r.markers[pvc.UID]; !marked && cur.Status.Phase == corev1.ClaimBound {
			// mark runs before every check, so a bound claim is marked
			// unless its volume could not be found.
			v.other = append(v.other, fmt.Sprintf("claim %s is bound but its volume could not be marked", pvc.Name))
		}
		if p := r.checkMarker(ctx, pvc); p != "" {
			v.lost = append(v.lost, p)
		}
	}
	return v
}
