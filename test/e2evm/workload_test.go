package e2evm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/resizer"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/e2e/workload"
	"source.plinth.dev/test/launch"
)

// TestWorkload runs the in-pod test workload on the VM node, where quotas
// are enforced, under runc and under gVisor (the node image has runsc, so
// the node gives containerd the runsc runtime; the test creates the
// RuntimeClass as a cluster's administrator would): nothing is skipped but
// what the runtime cannot do (gVisor: block claims, mount flags seen from
// inside), so the workload checks that statfs of a filesystem claim shows
// exactly its request and that writing past it fails with ENOSPC at
// exactly that size, besides everything it checks on the host. The suite
// grows every claim while the pod runs; under runc it also makes one
// request infeasible (larger than the node's data disk) and recovers it
// (the resizer's part, the same for every runtime). Then it deletes
// everything and requires every PV gone, and nothing of the volumes or the
// pod left on the node (nodeLeftovers).
func TestWorkload(t *testing.T) {
	w := vmWorld(t)
	if err := launch.CreateGVisorRuntimeClass(context.Background(), w.cp.Client); err != nil {
		t.Fatal(err)
	}
	for _, r := range []launch.Runtime{launch.RuncRuntime(), launch.GVisorRuntime()} {
		rt := workload.RuntimeOf(r)
		t.Run(rt.Name, func(t *testing.T) { testWorkload(t, w, rt) })
	}
}

func testWorkload(t *testing.T, w *world, rt workload.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	ns := newNamespace(t, w, "workload-"+rt.Name)
	cs := w.cp.Client
	spec := workload.NewSpec("workload", rt, true)
	for _, pvc := range spec.PVCs {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, spec.Pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := workload.WaitMarker(ctx, cs, ns, spec.Pod.Name, "[INIT-PASSED]", "[INIT-FAILED]", 5*time.Minute); err != nil {
		t.Fatalf("%v\nevents: %s", err, await.Events(ctx, cs, ns, spec.Pod.Name))
	}
	var pvs []string
	for _, pvc := range spec.PVCs {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, c.Spec.VolumeName)
		setRequest(t, w, ns, pvc.Name, workload.ResizeTo)
	}
	for _, pvc := range spec.PVCs {
		waitCapacity(t, w, ns, pvc.Name, workload.ResizeTo)
	}
	logs, err := workload.WaitMarker(ctx, cs, ns, spec.Pod.Name, "[RESIZE-PASSED]", "[RESIZE-FAILED]", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	passed, skipped, failed := workload.Checks(logs)
	for _, l := range skipped {
		if !skipAllowed(rt, l) {
			t.Errorf("the workload skipped a check on a node that enforces quotas: %s", l)
		} else {
			t.Logf("workload, %s: %s", rt.Name, l)
		}
	}
	for _, l := range failed {
		t.Errorf("workload: %s", l)
	}
	if passed == 0 {
		t.Fatalf("no passed check in the workload's log:\n%s", logs)
	}

	// Infeasible: more than the whole data disk. Then recovery. The
	// resizer's part, the same for every runtime: once, under runc.
	if rt.Class == "" {
		infeasibleAndBack(t, w, ns, spec.PVCs[0].Name)
	}

	// What the node holds for the running pod, seen by the check that
	// must find nothing after the teardown: it has to see every kind.
	running, err := cs.CoreV1().Pods(ns).Get(ctx, spec.Pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{string(running.UID)}
	checkSeesEverything(t, nodeLeftovers(t, w, ns, "leftovers-before", 0, pvs, keys), rt.SkipBlock != "")

	// Teardown: pod, then claims; every PV must go (Delete policy).
	if err := cs.CoreV1().Pods(ns).Delete(ctx, spec.Pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pvc := range spec.PVCs {
		if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range pvs {
		await.For(t, ctx, 2*time.Minute, "PV "+pv+" deleted", func() (bool, error) {
			_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, fmt.Errorf("still there (%v)", err)
		})
	}
	// And nothing on the node: volumes, records, project ID claims, quota
	// limits, loop devices, mounts, kubelet files and device nodes.
	after := nodeLeftovers(t, w, ns, "leftovers-after", 2*time.Minute, pvs, keys)
	if !strings.HasPrefix(after, "[NODE-CLEAN]") || !strings.HasSuffix(after, "quota limits checked") {
		t.Errorf("after the teardown: %s", after)
	}
	t.Logf("teardown on the node: %s", after)
	t.Logf("VM node, quotas enforced, %s: %d checks passed in the pod, %d skipped, %.1fs", rt.Name, passed, len(skipped), time.Since(start).Seconds())
}

// skipAllowed reports whether a skipped check of the workload (its log
// line) is one the runtime cannot do, by the reason the suite gave it.
func skipAllowed(rt workload.Runtime, line string) bool {
	for _, why := range []string{rt.SkipBlock, rt.SkipMountFlags} {
		if why != "" && strings.Contains(line, why) {
			return true
		}
	}
	return false
}

// infeasibleAndBack raises claim's request past the node's whole data disk,
// requires ControllerResizeInfeasible and the resizer's Event, then lowers
// it and requires the claim grown to that.
func infeasibleAndBack(t *testing.T, w *world, ns, claim string) {
	t.Helper()
	ctx := context.Background()
	cs := w.cp.Client
	setRequest(t, w, ns, claim, "3Gi")
	await.For(t, ctx, time.Minute, "claim "+claim+" ControllerResizeInfeasible", func() (bool, error) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
		return st == corev1.PersistentVolumeClaimControllerResizeInfeasible, fmt.Errorf("resize status %q", st)
	})
	await.For(t, ctx, time.Minute, "Event "+resizer.ReasonResizeFailed+" on "+claim, func() (bool, error) {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=" + resizer.ReasonResizeFailed})
		if err != nil {
			return false, err
		}
		return len(evs.Items) > 0, errors.New("no such Event")
	})
	setRequest(t, w, ns, claim, workload.RecoverTo)
	waitCapacity(t, w, ns, claim, workload.RecoverTo)
}

func setRequest(t *testing.T, w *world, ns, claim, size string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	if _, err := w.cp.Client.CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), claim, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the request of claim %s to %s: %v", claim, size, err)
	}
}

func waitCapacity(t *testing.T, w *world, ns, claim, size string) {
	t.Helper()
	want := resource.MustParse(size)
	ctx := context.Background()
	await.For(t, ctx, time.Minute, "claim "+claim+" at "+size, func() (bool, error) {
		pvc, err := w.cp.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := pvc.Status.Capacity[corev1.ResourceStorage]
		_, resizing := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
		return got.Cmp(want) == 0 && !resizing, fmt.Errorf("capacity %s, resize statuses %v", got.String(), pvc.Status.AllocatedResourceStatuses)
	})
}
