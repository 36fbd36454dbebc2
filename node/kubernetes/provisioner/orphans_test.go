package provisioner

import (
	"context"
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

	"source.plinth.dev/node/core/volume"
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
