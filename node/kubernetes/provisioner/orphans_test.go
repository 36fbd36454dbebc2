package provisioner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// TestOrphanedByHandDeletedPV: an administrator deletes PVs by hand. The
// volume of a Retain PV (and of a PV patched from Delete to Retain before
// its deletion) is kept past the grace period and reported on the Node; the
// volume of a Delete PV deleted by hand is moved into quarantine after the
// grace period, whole, and removed after the retention period.
func TestOrphanedByHandDeletedPV(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	retainClass := e.Class + "-retain"
	e.CreateClass(retainClass, corev1.PersistentVolumeReclaimRetain, nil)
	c := e.controller()
	c.OrphanGracePeriod = 2 * time.Second
	c.OrphanRetention = 8 * time.Second
	e.start(c)

	e.CreateClaim(controllertest.Claim{Name: "keep", Class: retainClass})
	e.CreateClaim(controllertest.Claim{Name: "patched"})
	e.CreateClaim(controllertest.Claim{Name: "del"})
	_, keepPV := e.WaitBound("keep")
	_, patchedPV := e.WaitBound("patched")
	_, delPV := e.WaitBound("del")
	delData := filepath.Join(e.Vols.Data.Volumes.FullPath(), delPV.Name, "data")
	if err := os.WriteFile(delData, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The policies as recorded on the node, the patched one after its PV
	// changed to Retain.
	patch := []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`)
	if _, err := e.Client.CoreV1().PersistentVolumes().Patch(ctx, patchedPV.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]volume.ReclaimPolicy{
		keepPV.Name:    volume.ReclaimRetain,
		patchedPV.Name: volume.ReclaimRetain,
		delPV.Name:     volume.ReclaimDelete,
	} {
		controllertest.Eventually(t, 30*time.Second, "policy of "+id+" recorded as "+string(want), func() (bool, error) {
			got, err := e.Vols.ReclaimPolicy(ctx, id)
			return got == want, err
		})
	}

	// The administrator deletes the Delete PV while it is still bound
	// (pv-protection holds it until the claim is gone), then the claims,
	// then the released Retain PVs.
	if err := e.Client.CoreV1().PersistentVolumes().Delete(ctx, delPV.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"keep", "patched", "del"} {
		if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range []*corev1.PersistentVolume{keepPV, patchedPV} {
		controllertest.Eventually(t, 30*time.Second, "PV "+pv.Name+" Released", func() (bool, error) {
			got, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.VolumeReleased, err
		})
		if err := e.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone := time.Now()
	for _, pv := range []*corev1.PersistentVolume{keepPV, patchedPV, delPV} {
		controllertest.Eventually(t, 60*time.Second, "PV "+pv.Name+" gone", func() (bool, error) {
			_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}

	// Delete: moved into quarantine after the grace period, whole ...
	controllertest.Eventually(t, 30*time.Second, "Delete volume quarantined", func() (bool, error) {
		return !slices.Contains(e.VolumeIDs(), delPV.Name), nil
	})
	quarantined := filepath.Join(e.Vols.Data.Quarantine.FullPath(), delPV.Name, "data")
	if got, err := os.ReadFile(quarantined); err != nil || string(got) != "precious" {
		t.Errorf("quarantined data %q, %v; want %q", got, err, "precious")
	}
	ev := e.WaitEvent(types.UID(e.Node), ReasonOrphanQuarantined, delPV.Name)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("%s Event is %s, want Warning", ReasonOrphanQuarantined, ev.Type)
	}
	quarantinedAt := time.Now()

	// Retain: kept, well past the grace period ...
	if wait := 3*c.OrphanGracePeriod - time.Since(gone); wait > 0 {
		time.Sleep(wait) // let a wrong removal happen
	}
	ids := e.VolumeIDs()
	for _, pv := range []*corev1.PersistentVolume{keepPV, patchedPV} {
		if !slices.Contains(ids, pv.Name) {
			t.Errorf("volume %s of a Retain PV was removed after its PV was deleted by hand", pv.Name)
		}
		if p, err := e.Vols.ReclaimPolicy(ctx, pv.Name); err != nil || p != volume.ReclaimRetain {
			t.Errorf("volume %s: recorded policy %q, %v; want retain", pv.Name, p, err)
		}
	}
	// ... and reported on the Node, as a Warning naming the volume.
	for _, pv := range []*corev1.PersistentVolume{keepPV, patchedPV} {
		ev := e.WaitEvent(types.UID(e.Node), ReasonOrphanRetained, pv.Name)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "reclaim policy Retain") {
			t.Errorf("%s Event for %s: %s %q; want a Warning saying it is kept for reclaim policy Retain", ReasonOrphanRetained, pv.Name, ev.Type, ev.Message)
		}
	}
	// ... and removed once its retention is over, not before.
	controllertest.Eventually(t, 30*time.Second, "quarantined volume removed", func() (bool, error) {
		return !controllertest.FileExists(filepath.Dir(quarantined)), nil
	})
	if waited := time.Since(quarantinedAt); waited < c.OrphanRetention-c.OrphanGracePeriod {
		t.Errorf("quarantined volume removed %s after it was quarantined, before its retention of %s", waited, c.OrphanRetention)
	}
	e.WaitEvent(types.UID(e.Node), ReasonOrphanDeleted, delPV.Name)
	for _, ev := range e.Events(types.UID(e.Node)) {
		if ev.Reason == ReasonOrphanDeleted && (ev.InvolvedObject.Name != e.Node || !strings.Contains(ev.Message, delPV.Name)) {
			t.Errorf("unexpected orphan deletion: %s", ev.Message)
		}
	}
}

// TestPolicyRecordedAtStart: a PV whose policy was never recorded (the
// process died between creating the PV and recording it, or the node ran
// an older version) is recorded as soon as the controller starts, before
// anyone could delete the PV.
func TestPolicyRecordedAtStart(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	retainClass := e.Class + "-retain"
	e.CreateClass(retainClass, corev1.PersistentVolumeReclaimRetain, nil)
	stop := e.start(e.controller())
	e.CreateClaim(controllertest.Claim{Name: "keep", Class: retainClass})
	_, pv := e.WaitBound("keep")
	controllertest.Eventually(t, 30*time.Second, "policy recorded", func() (bool, error) {
		p, err := e.Vols.ReclaimPolicy(ctx, pv.Name)
		return p == volume.ReclaimRetain, err
	})
	stop()
	rec, err := e.Vols.Data.State.Records.ChildFile(pv.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Remove(); err != nil {
		t.Fatal(err)
	}
	if p, err := e.Vols.ReclaimPolicy(ctx, pv.Name); err != nil || p != volume.ReclaimUnrecorded {
		t.Fatalf("after removing the record: %q, %v", p, err)
	}
	e.start(e.controller())
	controllertest.Eventually(t, 30*time.Second, "policy recorded again at start", func() (bool, error) {
		p, err := e.Vols.ReclaimPolicy(ctx, pv.Name)
		return p == volume.ReclaimRetain, err
	})
}

// TestRecordBeforePV: a PV this node made exists only once its volume's
// reclaim policy is recorded on the node's disk. Were the record written
// after the PV, a node stopped between the two and an etcd then restored
// without the PV would find a volume with no record, take it for a crash
// leftover that never had a PV, and remove it after the grace period
// instead of quarantining it. The test reads the record the moment each
// PV appears in a watch, for claims of a Delete and a Retain class.
func TestRecordBeforePV(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	retainClass := e.Class + "-retain"
	e.CreateClass(retainClass, corev1.PersistentVolumeReclaimRetain, nil)
	w, err := e.Client.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e.start(e.controller())
	want := map[string]volume.ReclaimPolicy{}
	for i := range 6 {
		class, policy := e.Class, volume.ReclaimDelete
		if i%2 == 1 {
			class, policy = retainClass, volume.ReclaimRetain
		}
		pvc := e.CreateClaim(controllertest.Claim{Name: fmt.Sprintf("c%d", i), Class: class})
		want[ownership.VolumeIDFor(pvc.UID)] = policy
	}
	deadline := time.After(60 * time.Second)
	for len(want) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the PV watch ended")
			}
			pv, isPV := ev.Object.(*corev1.PersistentVolume)
			if !isPV || ev.Type != watch.Added {
				continue
			}
			policy, mine := want[pv.Name]
			if !mine {
				continue
			}
			delete(want, pv.Name)
			got, err := e.Vols.ReclaimPolicy(ctx, pv.Name)
			if err != nil || got != policy {
				t.Errorf("PV %s appeared while its volume's recorded reclaim policy was %q (%v); want %q recorded before the PV", pv.Name, got, err, policy)
			}
		case <-deadline:
			t.Fatalf("timed out waiting for the PVs of %d claims", len(want))
		}
	}
}
