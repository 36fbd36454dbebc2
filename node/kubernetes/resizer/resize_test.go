package resizer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/volumetest"
)

// TestGrowWhileInUse grows a filesystem and a block claim while a process
// writes to each, and a read-only device serves the block volume too: the
// claims, PVs and volumes show the new size, the published devices show it
// without any node step, the read-only device stays read-only, and every
// byte written before and during the resize reads back.
func TestGrowWhileInUse(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.CreateClaim(controllertest.Claim{Name: "fs", Size: "16Mi"})
	e.CreateClaim(controllertest.Claim{Name: "blk", Size: "16Mi", Mode: corev1.PersistentVolumeBlock})
	fsClaim, _ := e.WaitBound("fs")
	blkClaim, _ := e.WaitBound("blk")
	fsID, blkID := ownership.VolumeIDFor(fsClaim.UID), ownership.VolumeIDFor(blkClaim.UID)
	rw, ro := e.attach(blkID, false), e.attach(blkID, true)
	_, fsDir, err := e.Vols.Locate(context.Background(), fsID)
	if err != nil {
		t.Fatal(err)
	}

	// Writers: files into the filesystem volume, blocks onto the device,
	// each within slots 4 KiB pieces (4 MiB) of its volume (files are
	// rewritten in turn), so that neither outgrows the 16Mi a quota
	// enforces before the resize.
	const slots = 1024
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var files, blocks atomic.Int64
	var werr atomic.Value
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(filepath.Join(fsDir, fmt.Sprintf("f%04d", i%slots)), bytes.Repeat([]byte{byte(i)}, 4096), 0o644); err != nil {
				werr.Store(err)
				return
			}
			files.Add(1)
		}
	})
	wg.Go(func() {
		f, err := os.OpenFile(rw.Path(), os.O_RDWR|os.O_SYNC, 0)
		if err != nil {
			werr.Store(err)
			return
		}
		defer f.Close()
		for i := int64(0); ; i = (i + 1) % slots {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i)}, 4096), i*4096); err != nil {
				werr.Store(err)
				return
			}
			blocks.Add(1)
		}
	})

	e.mustRequest("fs", "48Mi")
	e.mustRequest("blk", "48Mi")
	e.waitResized("fs", "48Mi", 30*time.Second)
	e.waitResized("blk", "48Mi", 30*time.Second)
	close(stop)
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		t.Fatalf("a writer failed during the resize: %v", err)
	}
	t.Logf("written during the test: %d files, %d blocks", files.Load(), blocks.Load())
	e.assertResized("fs", "48Mi")
	e.assertResized("blk", "48Mi")
	for _, d := range []struct {
		name string
		size func() (uint64, error)
	}{{"read-write device", rw.Size}, {"read-only device", ro.Size}} {
		if size, err := d.size(); err != nil || size != 48<<20 {
			t.Errorf("%s: size %d (%v), want %d", d.name, size, err, 48<<20)
		}
	}
	if fl, err := ro.Flags(); err != nil || !fl.ReadOnly {
		t.Errorf("read-only device after the resize: %+v (%v)", fl, err)
	}
	// The grown part of the device is usable, and what was written before
	// it grew is intact.
	f, err := os.OpenFile(rw.Path(), os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("tail"), 48<<20-4); err != nil {
		t.Errorf("writing the last bytes of the grown device: %v", err)
	}
	head := make([]byte, 4096)
	if _, err := f.ReadAt(head, 0); err != nil || head[0] != head[4095] {
		t.Errorf("first block after the resize: %v, bytes %d..%d", err, head[0], head[4095])
	}
	// File k holds the last of the writes i with i%slots == k.
	for n, k := files.Load(), int64(0); k < min(n, slots); k++ {
		last := k + (n-1-k)/slots*slots
		b, err := os.ReadFile(filepath.Join(fsDir, fmt.Sprintf("f%04d", k)))
		if err != nil || len(b) != 4096 || b[0] != byte(last) {
			t.Fatalf("file %d, last written during the resize by write %d: %d bytes (%v)", k, last, len(b), err)
		}
	}
	for _, pvc := range []*corev1.PersistentVolumeClaim{fsClaim, blkClaim} {
		e.WaitEvent(pvc.UID, ReasonResizing, "from 16Mi to 48Mi")
		e.WaitEvent(pvc.UID, ReasonResizeSuccess, "48Mi")
	}
}

// TestInfeasibleThenRecover: a request larger than the data filesystem is
// reported once (status ControllerResizeInfeasible, a ControllerResizeError
// condition, a Warning Event naming the free space) and not retried; the
// user lowers the request and the volume grows to that.
func TestInfeasibleThenRecover(t *testing.T) {
	e := newEnv(t)
	e.start()
	for _, c := range []controllertest.Claim{{Name: "fs", Size: "16Mi"}, {Name: "blk", Size: "16Mi", Mode: corev1.PersistentVolumeBlock}} {
		pvc := e.CreateClaim(c)
		e.WaitBound(c.Name)
		e.mustRequest(c.Name, "1Pi")
		controllertest.Eventually(t, 30*time.Second, c.Name+" infeasible", func() (bool, error) {
			p := e.claim(c.Name)
			return p.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimControllerResizeInfeasible, nil
		})
		ev := e.WaitEvent(pvc.UID, ReasonResizeFailed, "not enough space")
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "free") || !strings.Contains(ev.Message, "Lower the request (to more than 16Mi)") {
			t.Errorf("%s: Event %s %q does not name the free space and the remedy", c.Name, ev.Type, ev.Message)
		}
		p := e.claim(c.Name)
		var cond *corev1.PersistentVolumeClaimCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PersistentVolumeClaimControllerResizeError {
				cond = &p.Status.Conditions[i]
			}
		}
		if cond == nil || !strings.Contains(cond.Message, "not enough space") {
			t.Errorf("%s: no ControllerResizeError condition with the reason: %+v", c.Name, p.Status.Conditions)
		}
		if a := p.Status.AllocatedResources[corev1.ResourceStorage]; a.String() != "1Pi" {
			t.Errorf("%s: allocatedResources %s, want 1Pi", c.Name, a.String())
		}
		// No retry loop: the claim is left alone until the user acts.
		time.Sleep(3 * time.Second)
		if n := e.eventCount(pvc.UID, ReasonResizeFailed); n != 1 {
			t.Errorf("%s: %d VolumeResizeFailed Events in 3 s; an infeasible resize must not be retried", c.Name, n)
		}
		st, err := e.Vols.Stat(context.Background(), ownership.VolumeIDFor(pvc.UID))
		if err != nil || st.CapacityBytes != 16<<20 {
			t.Errorf("%s: volume after the infeasible resize: %d bytes (%v), want 16Mi", c.Name, st.CapacityBytes, err)
		}
		e.mustRequest(c.Name, "32Mi")
		e.waitResized(c.Name, "32Mi", 30*time.Second)
		e.assertResized(c.Name, "32Mi")
		e.WaitEvent(pvc.UID, ReasonResizing, "failed resize")
	}
}

// TestInfeasibleRetriedWhenRoomComesFree: a resize refused for lack of
// space waits, without a retry loop, and is done once the node has room
// for it (here another claim's volume is deleted), with the request left
// as it was. The resizer's minute poll is off, so the retry the test sees
// is the one the volume manager's change brings, at once.
func TestInfeasibleRetriedWhenRoomComesFree(t *testing.T) {
	e := newEnv(t)
	// A data filesystem of its own, whose free space is the test's.
	e.Dir = volumetest.Tmpfs(t, 64<<20)
	e.Vols = controllertest.NewVolumes(t, e.Dir, true)
	e.startProvisioner(e.Node, e.Vols)
	// Without the minute's poll, only the volume manager's change can
	// bring the resize back.
	e.startResizerWith(tickless{})
	pvc := e.CreateClaim(controllertest.Claim{Name: "blk", Size: "16Mi", Mode: corev1.PersistentVolumeBlock})
	e.WaitBound("blk")
	e.CreateClaim(controllertest.Claim{Name: "filler", Size: "40Mi", Mode: corev1.PersistentVolumeBlock})
	e.WaitBound("filler")
	e.mustRequest("blk", "32Mi")
	controllertest.Eventually(t, 30*time.Second, "blk infeasible", func() (bool, error) {
		p := e.claim("blk")
		return p.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimControllerResizeInfeasible, nil
	})
	ev := e.WaitEvent(pvc.UID, ReasonResizeFailed, "not enough space")
	if !strings.Contains(ev.Message, "tried again when the node has room") {
		t.Errorf("Event %q does not say the resize is tried again", ev.Message)
	}
	time.Sleep(3 * time.Second)
	if n := e.eventCount(pvc.UID, ReasonResizeFailed); n != 1 {
		t.Errorf("%d VolumeResizeFailed Events in 3 s while the node had no room; want 1, no retry loop", n)
	}
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(context.Background(), "filler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitResized("blk", "32Mi", time.Minute)
	e.assertResized("blk", "32Mi")
	e.WaitEvent(pvc.UID, ReasonResizing, "has room now")
}

// tickless is the real clock whose tickers never tick: a resizer on it
// never polls for room (roomInterval).
type tickless struct{ clock.RealClock }

func (tickless) NewTicker(d time.Duration) clock.Ticker {
	return clocktesting.NewFakeClock(time.Now()).NewTicker(d)
}

// TestShrinkRefused: a request below the claim's capacity is refused by
// the API server, and the volume is untouched.
func TestShrinkRefused(t *testing.T) {
	e := newEnv(t)
	e.start()
	pvc := e.CreateClaim(controllertest.Claim{Name: "fs", Size: "16Mi"})
	e.WaitBound("fs")
	err := e.request("fs", "8Mi")
	if err == nil || !strings.Contains(err.Error(), "less than") {
		t.Fatalf("shrinking request: error %v, want a refusal", err)
	}
	st, err := e.Vols.Stat(context.Background(), ownership.VolumeIDFor(pvc.UID))
	if err != nil || st.CapacityBytes != 16<<20 {
		t.Errorf("volume after a refused shrink: %d bytes (%v)", st.CapacityBytes, err)
	}
}

// TestResumeNeverShrinks: a resize found in progress (the node crashed
// after recording the target, before finishing) is finished at its
// recorded size even though the request was lowered meanwhile: a volume
// that may already have that size is never shrunk, and an Event says so.
func TestResumeNeverShrinks(t *testing.T) {
	e := newEnv(t)
	e.startProvisioner(e.Node, e.Vols)
	pvc := e.CreateClaim(controllertest.Claim{Name: "fs", Size: "16Mi"})
	e.WaitBound("fs")
	e.mustRequest("fs", "32Mi")
	// What the crashed resizer left: the target recorded, nothing else.
	cur := e.claim("fs")
	want := markInProgress(cur, resource.MustParse("48Mi"), metav1.Now())
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).UpdateStatus(context.Background(), want, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startResizer()
	e.waitResized("fs", "48Mi", 30*time.Second)
	e.assertResized("fs", "48Mi")
	e.WaitEvent(pvc.UID, ReasonResizeSuccess, "never shrinks")
}

// TestForeignClaimsUntouched: the claim of another node's volume and a
// claim annotated as ours whose PV belongs to another driver are left
// exactly as they are, however their requests change.
func TestForeignClaimsUntouched(t *testing.T) {
	e := newEnv(t)
	e.start()
	// Another node, with its own provisioner and no resizer.
	other := e.Node + "-b"
	otherVols := controllertest.NewVolumes(t, t.TempDir(), true)
	e.startProvisioner(other, otherVols)
	e.CreateClaim(controllertest.Claim{Name: "other-node", Size: "16Mi", Node: other})
	e.WaitBound("other-node")
	// Another driver: a PV it made, and a claim bound to it that carries
	// our annotations.
	const driver = "other.csi.example.com"
	e.CreateClassFor(driver, "other-class", corev1.PersistentVolumeReclaimRetain, nil)
	mode := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign-" + e.NS, Labels: map[string]string{ownership.LabelNode: ownership.NodeLabelValue(e.Node)}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "other-class",
			VolumeMode:                    &mode,
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.NS, Name: "other-driver"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h1"},
			},
		},
	}
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	foreign := e.ClaimObject(controllertest.Claim{Name: "other-driver", Size: "16Mi", Class: "other-class"})
	foreign.Spec.VolumeName = pv.Name
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitBound("other-driver")
	// A claim of ours, resized at the same time, shows the resizer works.
	e.CreateClaim(controllertest.Claim{Name: "ours", Size: "16Mi"})
	e.WaitBound("ours")

	for _, name := range []string{"other-node", "other-driver", "ours"} {
		e.mustRequest(name, "32Mi")
	}
	e.waitResized("ours", "32Mi", 30*time.Second)
	time.Sleep(3 * time.Second) // time for a wrong resize to happen
	for _, name := range []string{"other-node", "other-driver"} {
		p := e.claim(name)
		if c := p.Status.Capacity[corev1.ResourceStorage]; c.String() != "16Mi" || p.Status.AllocatedResourceStatuses != nil || p.Status.AllocatedResources != nil {
			t.Errorf("%s: touched by the resizer: capacity %s, statuses %v, allocated %v", name, c.String(), p.Status.AllocatedResourceStatuses, p.Status.AllocatedResources)
		}
		for _, ev := range e.Events(p.UID) {
			if ev.Source.Component == names.DriverName && strings.HasPrefix(ev.Reason, "VolumeResize") || ev.Reason == ReasonResizing {
				t.Errorf("%s: Event %s %q from the resizer", name, ev.Reason, ev.Message)
			}
		}
	}
	got, err := e.Client.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{})
	if err != nil || got.Spec.Capacity.Storage().String() != "16Mi" {
		t.Errorf("foreign PV changed: %v (%v)", got.Spec.Capacity, err)
	}
	if ids := controllertest.ListIDs(t, otherVols); len(ids) != 1 {
		t.Fatalf("other node has volumes %v", ids)
	} else if st, err := otherVols.Stat(context.Background(), ids[0]); err != nil || st.CapacityBytes != 16<<20 {
		t.Errorf("other node's volume: %d bytes (%v), want 16Mi", st.CapacityBytes, err)
	}
}

// TestConcurrentResizes grows 50 claims at once, filesystem and block.
func TestConcurrentResizes(t *testing.T) {
	e := newEnv(t)
	e.start()
	const n = 50
	for i := range n {
		c := controllertest.Claim{Name: fmt.Sprintf("c%02d", i), Size: "4Mi"}
		if i%2 == 1 {
			c.Mode = corev1.PersistentVolumeBlock
		}
		e.CreateClaim(c)
	}
	for i := range n {
		e.WaitBound(fmt.Sprintf("c%02d", i))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := e.request(fmt.Sprintf("c%02d", i), "12Mi"); err != nil {
				t.Errorf("raising c%02d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		e.waitResized(fmt.Sprintf("c%02d", i), "12Mi", 60*time.Second)
		e.assertResized(fmt.Sprintf("c%02d", i), "12Mi")
	}
}

// TestClaimBoundByHand: a retained volume given to a new claim by hand
// (spec.volumeName) does not grow while the claim lacks the annotations
// that say it asks Plinth for a volume on this node (the admission
// policies let a node write only claims placed on it, so the resizer
// leaves others alone), and grows once its user adds them, as
// docs/using.md tells.
func TestClaimBoundByHand(t *testing.T) {
	e := newEnv(t)
	e.CreateClass("retain", corev1.PersistentVolumeReclaimRetain, nil)
	e.start()
	ctx := context.Background()
	claims, pvs := e.Client.CoreV1().PersistentVolumeClaims(e.NS), e.Client.CoreV1().PersistentVolumes()
	first := e.CreateClaim(controllertest.Claim{Name: "first", Class: "retain"})
	_, pv := e.WaitBound("first")
	t.Cleanup(func() { _ = pvs.Delete(context.Background(), pv.Name, metav1.DeleteOptions{}) })
	if err := claims.Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "PV "+pv.Name+" Released", func() (bool, error) {
		got, err := pvs.Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.VolumeReleased, err
	})
	// The operator frees the PV for a new claim, and the user's claim
	// names it.
	if _, err := pvs.Patch(ctx, pv.Name, types.MergePatchType, []byte(`{"spec":{"claimRef":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	second := e.ClaimObject(controllertest.Claim{Name: "second", Class: "retain"})
	second.Annotations = nil
	second.Spec.VolumeName = pv.Name
	if _, err := claims.Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, _ := e.WaitBound("second")
	if pvc.Spec.VolumeName != pv.Name {
		t.Fatalf("claim second bound to %s, want %s", pvc.Spec.VolumeName, pv.Name)
	}

	e.mustRequest("second", "32Mi")
	time.Sleep(3 * time.Second) // time for a resize to happen
	p := e.claim("second")
	if c := p.Status.Capacity[corev1.ResourceStorage]; c.String() != "16Mi" || p.Status.AllocatedResourceStatuses != nil {
		t.Errorf("claim bound by hand, not annotated: capacity %s, statuses %v; want 16Mi, untouched", c.String(), p.Status.AllocatedResourceStatuses)
	}
	if st, err := e.Vols.Stat(ctx, pv.Name); err != nil || st.CapacityBytes != 16<<20 {
		t.Errorf("volume of the claim bound by hand: %d bytes (%v), want 16Mi", st.CapacityBytes, err)
	}

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		ownership.AnnStorageProvisioner, names.DriverName, ownership.AnnSelectedNode, e.Node)
	if _, err := claims.Patch(ctx, "second", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitResized("second", "32Mi", 30*time.Second)
	e.assertResized("second", "32Mi")
	// The annotations made the claim the node's, and bound: nothing to
	// provision for it.
	if ids := e.VolumeIDs(); len(ids) != 1 || ids[0] != pv.Name {
		t.Errorf("volumes on the node: %v, want only %s", ids, pv.Name)
	}
}
