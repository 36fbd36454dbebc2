package provisioner

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

func TestProvisionFilesystemAndBlock(t *testing.T) {
	e := newEnv(t, true)
	e.start(e.controller())
	fsClaim := e.CreateClaim(controllertest.Claim{Name: "fs", Size: "64Mi"})
	blkClaim := e.CreateClaim(controllertest.Claim{Name: "blk", Size: "32Mi", Mode: corev1.PersistentVolumeBlock,
		Access: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}, BetaAnn: true})

	for _, tc := range []struct {
		pvc   *corev1.PersistentVolumeClaim
		mode  corev1.PersistentVolumeMode
		vmode volume.Mode
		bytes int64
	}{
		{fsClaim, corev1.PersistentVolumeFilesystem, volume.Filesystem, 64 << 20},
		{blkClaim, corev1.PersistentVolumeBlock, volume.Block, 32 << 20},
	} {
		_, pv := e.WaitBound(tc.pvc.Name)
		id := "pvc-" + string(tc.pvc.UID)
		if pv.Name != id {
			t.Errorf("%s: PV name %q, want %q", tc.pvc.Name, pv.Name, id)
		}
		csi := pv.Spec.CSI
		if csi == nil || csi.Driver != names.DriverName || csi.VolumeHandle != id {
			t.Errorf("%s: CSI source %+v", tc.pvc.Name, csi)
		}
		if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Value() != tc.bytes {
			t.Errorf("%s: capacity %s, want %d", tc.pvc.Name, got.String(), tc.bytes)
		}
		if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != tc.pvc.UID || ref.Name != tc.pvc.Name || ref.Namespace != e.NS {
			t.Errorf("%s: claimRef %+v", tc.pvc.Name, ref)
		}
		if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != tc.mode {
			t.Errorf("%s: volume mode %v", tc.pvc.Name, pv.Spec.VolumeMode)
		}
		if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			t.Errorf("%s: reclaim policy %s", tc.pvc.Name, pv.Spec.PersistentVolumeReclaimPolicy)
		}
		if h, ok := ownership.AffinityHostname(pv); !ok || h != e.Node {
			t.Errorf("%s: node affinity %+v", tc.pvc.Name, pv.Spec.NodeAffinity)
		}
		if pv.Annotations[ownership.AnnProvisionedBy] != names.DriverName {
			t.Errorf("%s: annotations %v", tc.pvc.Name, pv.Annotations)
		}
		if !slices.Equal(pv.Spec.AccessModes, tc.pvc.Spec.AccessModes) {
			t.Errorf("%s: access modes %v", tc.pvc.Name, pv.Spec.AccessModes)
		}
		st, err := e.Vols.Stat(context.Background(), id)
		if err != nil {
			t.Fatalf("%s: volume: %v", tc.pvc.Name, err)
		}
		if st.Mode != tc.vmode || st.CapacityBytes != tc.bytes {
			t.Errorf("%s: volume is %v of %d bytes", tc.pvc.Name, st.Mode, st.CapacityBytes)
		}
		if tc.vmode == volume.Block || e.Vols.CapacityEnforced() {
			e.WaitEvent(tc.pvc.UID, ReasonProvisioningSucceeded, id)
		}
	}
	// Where capacity cannot be enforced (this host's filesystem), the
	// filesystem claim (only) gets a warning; where it can (the kernel-test
	// VM), neither does.
	warned := []*corev1.PersistentVolumeClaim{blkClaim}
	if e.Vols.CapacityEnforced() {
		warned = append(warned, fsClaim)
	} else {
		e.WaitEvent(fsClaim.UID, ReasonCapacityNotEnforced, "cannot enforce")
		e.WaitEvent(types.UID(e.Node), ReasonCapacityNotEnforced, "provisioned anyway")
	}
	for _, pvc := range warned {
		for _, ev := range e.Events(pvc.UID) {
			if ev.Reason == ReasonCapacityNotEnforced {
				t.Errorf("claim %s got %s", pvc.Name, ev.Reason)
			}
		}
	}
}

func TestDeleteReleasedAndRetain(t *testing.T) {
	e := newEnv(t, true)
	retainClass := e.Class + "-retain"
	e.CreateClass(retainClass, corev1.PersistentVolumeReclaimRetain, nil)
	e.start(e.controller())
	del := e.CreateClaim(controllertest.Claim{Name: "del"})
	blk := e.CreateClaim(controllertest.Claim{Name: "blk", Mode: corev1.PersistentVolumeBlock})
	keep := e.CreateClaim(controllertest.Claim{Name: "keep", Class: retainClass})
	_, delPV := e.WaitBound("del")
	e.WaitBound("blk")
	_, keepPV := e.WaitBound("keep")
	if keepPV.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Fatalf("retain class gave policy %s", keepPV.Spec.PersistentVolumeReclaimPolicy)
	}
	if len(e.VolumeIDs()) != 3 {
		t.Fatalf("volumes before deletion: %v", e.VolumeIDs())
	}
	ctx := context.Background()
	for _, c := range []*corev1.PersistentVolumeClaim{del, blk, keep} {
		if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*corev1.PersistentVolumeClaim{del, blk} {
		id := ownership.VolumeIDFor(c.UID)
		controllertest.Eventually(t, 60*time.Second, "PV "+id+" deleted", func() (bool, error) {
			_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, id, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
		if slices.Contains(e.VolumeIDs(), id) {
			t.Errorf("volume %s still exists after its PV was deleted", id)
		}
	}
	e.WaitEvent(delPV.UID, ReasonVolumeDeleted, "reclaim policy Delete")
	time.Sleep(time.Second) // a repeated deletion would show by now
	n := 0
	for _, ev := range e.Events(delPV.UID) {
		if ev.Reason == ReasonVolumeDeleted {
			n += int(ev.Count)
		}
	}
	if n != 1 {
		t.Errorf("%d %s Events for one deletion, want 1", n, ReasonVolumeDeleted)
	}

	// Retain: the PV is Released and stays, and so does the volume.
	controllertest.Eventually(t, 30*time.Second, "retained PV Released", func() (bool, error) {
		pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, keepPV.Name, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeReleased, err
	})
	time.Sleep(2 * time.Second) // give a wrong deletion time to happen
	if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, keepPV.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("retained PV: %v", err)
	}
	if ids := e.VolumeIDs(); !slices.Equal(ids, []string{keepPV.Name}) {
		t.Errorf("volumes after deletion: %v, want only the retained %s", ids, keepPV.Name)
	}
	for _, ev := range e.Events(keepPV.UID) {
		if ev.Reason == ReasonVolumeDeleted {
			t.Errorf("retained PV got event %s: %s", ev.Reason, ev.Message)
		}
	}
}

// TestRootDirMode: a filesystem volume's root directory is 0777 unless its
// class asks for a stricter mode (parameter rootDirMode); either way the
// PV records the mode, a pod's user can write to the default volume
// without an fsGroup but to a 0770 one only in the fsGroup the kubelet
// gives the directory, a block claim of a class with the parameter is
// served, and a bad mode is refused before anything is made.
func TestRootDirMode(t *testing.T) {
	e := newEnv(t, true)
	strict, bad := e.Class+"-strict", e.Class+"-setgid"
	e.CreateClass(strict, corev1.PersistentVolumeReclaimDelete, map[string]string{names.ParameterRootDirMode: "0770"})
	e.CreateClass(bad, corev1.PersistentVolumeReclaimDelete, map[string]string{names.ParameterRootDirMode: "2770"})
	e.start(e.controller())
	plain := e.CreateClaim(controllertest.Claim{Name: "plain"})
	tight := e.CreateClaim(controllertest.Claim{Name: "tight", Class: strict})
	blk := e.CreateClaim(controllertest.Claim{Name: "blk", Class: strict, Mode: corev1.PersistentVolumeBlock})
	refused := e.CreateClaim(controllertest.Claim{Name: "refused", Class: bad})
	const podUID, podGID, fsGroup = 65534, 65534, 4242
	for _, tc := range []struct {
		pvc              *corev1.PersistentVolumeClaim
		mode             string
		plain, withGroup bool
	}{
		{plain, "0777", true, true},
		{tight, "0770", false, true},
	} {
		_, pv := e.WaitBound(tc.pvc.Name)
		if got := pv.Spec.CSI.VolumeAttributes[names.ParameterRootDirMode]; got != tc.mode {
			t.Errorf("%s: PV records root directory mode %q, want %q", tc.pvc.Name, got, tc.mode)
		}
		_, dir, err := e.Vols.Locate(context.Background(), pv.Name)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := volume.FormatRootDirMode(fi.Mode().Perm()); got != tc.mode || fi.Mode()&(fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky) != 0 {
			t.Errorf("%s: root directory mode %v, want %s", tc.pvc.Name, fi.Mode(), tc.mode)
		}
		if err := volumetest.CreateFileAs(dir, "a", podUID, podGID); (err == nil) != tc.plain {
			t.Errorf("%s: pod user without fsGroup writes: %v, want writable=%v", tc.pvc.Name, err, tc.plain)
		}
		if err := os.Chown(dir, -1, fsGroup); err != nil { // the kubelet's part of an fsGroup
			t.Fatal(err)
		}
		if err := volumetest.CreateFileAs(dir, "b", podUID, podGID, fsGroup); (err == nil) != tc.withGroup {
			t.Errorf("%s: pod user with fsGroup writes: %v, want writable=%v", tc.pvc.Name, err, tc.withGroup)
		}
	}
	_, blkPV := e.WaitBound(blk.Name)
	if attrs := blkPV.Spec.CSI.VolumeAttributes; len(attrs) != 0 {
		t.Errorf("block PV has volume attributes %v, want none", attrs)
	}
	e.WaitEvent(refused.UID, ReasonProvisioningFailed, `parameter rootDirMode: invalid volume request: root directory mode "2770"`)
	e.NoPV(refused.UID)
	if slices.Contains(e.VolumeIDs(), ownership.VolumeIDFor(refused.UID)) {
		t.Error("a volume was made for a claim whose class has a bad rootDirMode")
	}
}

// TestBadInput: every request that cannot be served gets a ProvisioningFailed
// Event with a clear reason, and leaves neither a volume nor a PV.
func TestBadInput(t *testing.T) {
	e := newEnv(t, true)
	paramsClass := e.Class + "-params"
	e.CreateClass(paramsClass, corev1.PersistentVolumeReclaimDelete, map[string]string{"fsType": "ext4"})
	e.start(e.controller())
	for _, tc := range []struct {
		claim controllertest.Claim
		want  string
	}{
		{controllertest.Claim{Name: "rwx", Access: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}, `access mode "ReadWriteMany" is not supported`},
		{controllertest.Claim{Name: "rox", Access: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany}}, `access mode "ReadOnlyMany" is not supported`},
		{controllertest.Claim{Name: "params", Class: paramsClass}, "unknown parameters fsType"},
		{controllertest.Claim{Name: "huge", Size: "8Ei"}, "over the maximum"},
		{controllertest.Claim{Name: "clamped", Size: "100Ei"}, "over the maximum"},
		{controllertest.Claim{Name: "no-class", Class: "does-not-exist"}, `StorageClass "does-not-exist" not found`},
		// Larger than the host's disk, below the size limit: a full disk.
		{controllertest.Claim{Name: "full-fs", Size: "1Pi"}, "not enough space"},
		{controllertest.Claim{Name: "full-blk", Size: "1Pi", Mode: corev1.PersistentVolumeBlock}, "not enough space"},
	} {
		t.Run(tc.claim.Name, func(t *testing.T) {
			pvc := e.CreateClaim(tc.claim)
			ev := e.WaitEvent(pvc.UID, ReasonProvisioningFailed, tc.want)
			// Each layer adds only what it knows: the volume is named once.
			if n := strings.Count(ev.Message, ownership.VolumeIDFor(pvc.UID)); n > 1 {
				t.Errorf("Event names the volume %d times: %q", n, ev.Message)
			}
			e.NoPV(pvc.UID)
			if ids := e.VolumeIDs(); len(ids) != 0 {
				t.Errorf("volumes left behind: %v", ids)
			}
		})
	}
	// Malformed for us though valid for the API server.
	for _, tc := range []struct {
		name string
		mut  func(*corev1.PersistentVolumeClaim)
		want string
	}{
		{"empty-class", func(p *corev1.PersistentVolumeClaim) { empty := ""; p.Spec.StorageClassName = &empty }, "claim has no StorageClass"},
		{"selector", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, "selector"},
		{"clone-of-nothing", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "nothing"}
		}, "PersistentVolumeClaim " + e.NS + "/nothing does not exist"},
		{"attributes-class", func(p *corev1.PersistentVolumeClaim) {
			gold := "gold"
			p.Spec.VolumeAttributesClassName = &gold
		}, "volume attributes classes are not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.ClaimObject(controllertest.Claim{Name: tc.name})
			tc.mut(c)
			pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), c, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e.WaitEvent(pvc.UID, ReasonProvisioningFailed, tc.want)
			e.NoPV(pvc.UID)
		})
	}
	// The claims too large for the node stay queued, and each retry's
	// Create is a volume being made (its intent record) for a moment, so
	// a volume left behind is one that stays.
	controllertest.Eventually(t, 10*time.Second, "no volumes left behind", func() (bool, error) {
		ids := e.VolumeIDs()
		return len(ids) == 0, fmt.Errorf("volumes %v", ids)
	})
	// Inputs the API server itself refuses never reach the controller;
	// validateClaim still checks them (see TestValidateClaim).
	for name, c := range map[string]*corev1.PersistentVolumeClaim{
		"zero size":    e.ClaimObject(controllertest.Claim{Name: "zero", Size: "0"}),
		"unknown mode": e.ClaimObject(controllertest.Claim{Name: "tape", Mode: "Tape"}),
	} {
		if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), c, metav1.CreateOptions{}); err == nil {
			t.Errorf("%s: API server accepted the claim; the controller must then refuse it (extend this test)", name)
		}
	}
	// A good claim after all that still works: bad input did not wedge
	// the controller.
	e.CreateClaim(controllertest.Claim{Name: "good"})
	e.WaitBound("good")
}

// TestCapacityNotEnforcedRefused: on a node that cannot enforce quotas and
// was not told to accept that, filesystem claims fail clearly and are
// handed back to the scheduler, which may find a node that enforces
// sizes, while block claims still work. A claim placed here again (as
// the scheduler does where no node enforces sizes) is held for a while
// before it is handed back again, and says so: no loop of writes at the
// scheduler's retry rate.
func TestCapacityNotEnforcedRefused(t *testing.T) {
	e := newEnv(t, false)
	if e.Vols.CapacityEnforced() {
		ktest.SkipExpected(t, "the data filesystem enforces project quotas, so there is nothing to refuse; the refusal runs on hosts without them (test-unit)")
	}
	e.start(e.controller())
	fs := e.CreateClaim(controllertest.Claim{Name: "fs"})
	e.CreateClaim(controllertest.Claim{Name: "blk", Mode: corev1.PersistentVolumeBlock})
	e.WaitBound("blk")
	ev := e.WaitEvent(fs.UID, ReasonProvisioningFailed, "--allow-unenforced-capacity")
	if !strings.Contains(ev.Message, "the scheduler chooses a node again") {
		t.Errorf("ProvisioningFailed %q does not say the claim was handed back", ev.Message)
	}
	got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), fs.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := got.Annotations[ownership.AnnSelectedNode]; ok {
		t.Errorf("the refused claim is still placed on %q", n)
	}
	// The node says so too, for whoever looks at the node, not a claim.
	e.WaitEvent(types.UID(e.Node), ReasonCapacityNotEnforced, "filesystem claims are refused")
	e.NoPV(fs.UID)
	if ids := e.VolumeIDs(); len(ids) != 1 {
		t.Errorf("volumes: %v, want only the block volume", ids)
	}

	// The test plays the scheduler, which has no other node to choose.
	// The hold is the controller's RetryMax here (2 s; holdFor).
	placed := time.Now()
	placeAgain(t, e, fs.Name)
	held := e.WaitEvent(fs.UID, ReasonProvisioningFailed, "placed on this node again")
	if !strings.Contains(held.Message, "stays here 2s, then is handed back again") {
		t.Errorf("hold Event %q does not say for how long", held.Message)
	}
	unplaced := waitUnplaced(t, e, fs.Name)
	if d := unplaced.Sub(placed); d < 2*time.Second {
		t.Errorf("the claim placed here again was handed back after %s, before its hold of 2s", d.Round(time.Millisecond))
	}
	holds := int32(0)
	for _, ev := range e.Events(fs.UID) {
		if strings.Contains(ev.Message, "placed on this node again") {
			holds += max(ev.Count, 1)
		}
	}
	if holds != 1 {
		t.Errorf("the hold was announced %d times, want once", holds)
	}
	e.NoPV(fs.UID)
}

// placeAgain sets the claim's selected-node annotation to the env's node,
// as the scheduler does.
func placeAgain(t *testing.T, e *env, name string) {
	t.Helper()
	if err := placeClaim(e.Client, e.NS, name, e.Node, ""); err != nil {
		t.Fatal(err)
	}
}

// placeClaim sets the selected-node annotation of claim ns/name to node,
// as the scheduler does: if resourceVersion is set, only on that version
// of the claim (a conflict error otherwise).
func placeClaim(client kubernetes.Interface, ns, name, node, resourceVersion string) error {
	meta := map[string]any{"annotations": map[string]string{ownership.AnnSelectedNode: node}}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// waitUnplaced waits until the claim has no selected-node annotation and
// returns when it saw that.
func waitUnplaced(t *testing.T, e *env, name string) time.Time {
	t.Helper()
	controllertest.Eventually(t, 30*time.Second, "claim "+name+" unplaced", func() (bool, error) {
		c, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, placed := c.Annotations[ownership.AnnSelectedNode]
		return !placed, nil
	})
	return time.Now()
}

// TestForeignObjects: claims and PVs that are not ours, including malformed
// ones, are left exactly as they are and do not disturb the controller.
func TestForeignObjects(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	// Foreign claims: another node, another driver, not yet scheduled.
	otherNode := e.CreateClaim(controllertest.Claim{Name: "other-node", Node: "some-other-node"})
	// (The PV controller keeps the provisioner annotation in line with the
	// class, so a claim of another driver has a class of that driver.)
	e.CreateClassFor("ebs.csi.aws.com", e.Class+"-ebs", corev1.PersistentVolumeReclaimDelete, nil)
	otherDriver := e.ClaimObject(controllertest.Claim{Name: "other-driver", Class: e.Class + "-ebs"})
	otherDriver.Annotations[ownership.AnnStorageProvisioner] = "ebs.csi.aws.com"
	unscheduled := e.ClaimObject(controllertest.Claim{Name: "unscheduled"})
	delete(unscheduled.Annotations, ownership.AnnSelectedNode)
	var foreignClaims []*corev1.PersistentVolumeClaim
	foreignClaims = append(foreignClaims, otherNode)
	for _, c := range []*corev1.PersistentVolumeClaim{otherDriver, unscheduled} {
		made, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		foreignClaims = append(foreignClaims, made)
	}
	// Foreign PVs, Released with policy Delete (what would make us delete
	// a volume of ours), some carrying our label so the informer sees them.
	mk := func(name string, mut func(*corev1.PersistentVolume)) string {
		fs := corev1.PersistentVolumeFilesystem
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ownership.LabelNode: ownership.NodeLabelValue(e.Node)},
				Annotations: map[string]string{ownership.AnnProvisionedBy: names.DriverName}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				VolumeMode:                    &fs,
				ClaimRef:                      &corev1.ObjectReference{Namespace: e.NS, Name: "gone-" + name, UID: "00000000-0000-0000-0000-000000000001"},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: name},
				},
			},
		}
		mut(pv)
		if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating PV %s: %v", name, err)
		}
		t.Cleanup(func() { _ = e.Client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}) })
		return name
	}
	foreignPVs := []string{
		mk("pvc-00000000-0000-0000-0000-0000000000a1", func(pv *corev1.PersistentVolume) {}), // no node affinity
		mk("pvc-00000000-0000-0000-0000-0000000000a2", func(pv *corev1.PersistentVolume) { // another driver
			pv.Spec.CSI.Driver = "other.example.com"
		}),
		mk("pvc-00000000-0000-0000-0000-0000000000a3", func(pv *corev1.PersistentVolume) { // another node
			pv.Spec.NodeAffinity = buildPV(e.ClaimObject(controllertest.Claim{Name: "x"}), &request{id: pv.Name, class: testClass()}, names.DriverName, "other-host", "x").Spec.NodeAffinity
		}),
		mk("pvc-00000000-0000-0000-0000-0000000000a4", func(pv *corev1.PersistentVolume) { // not CSI
			pv.Spec.CSI = nil
			pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/tmp/x"}
		}),
		mk("weird-name", func(pv *corev1.PersistentVolume) {}), // handle not ours
	}
	// A volume directory entry for one of them, so a wrong deletion shows.
	if _, err := e.Vols.Create(ctx, foreignPVs[0], volume.Filesystem, 1<<20); err != nil {
		t.Fatal(err)
	}
	e.start(e.controller())
	mine := e.CreateClaim(controllertest.Claim{Name: "mine"})
	e.WaitBound("mine")
	time.Sleep(3 * time.Second) // the PV controller marks the foreign PVs Released meanwhile
	for _, name := range foreignPVs {
		if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("foreign PV %s: %v", name, err)
		}
	}
	for _, c := range foreignClaims {
		got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil || got.Spec.VolumeName != "" {
			t.Errorf("foreign claim %s touched: %v %q", c.Name, err, got.Spec.VolumeName)
		}
		e.NoPV(c.UID)
	}
	want := []string{foreignPVs[0], ownership.VolumeIDFor(mine.UID)}
	slices.Sort(want)
	if ids := e.VolumeIDs(); !slices.Equal(ids, want) {
		t.Errorf("volumes: %v", ids)
	}
}

// TestPVMadeElsewhere: the PV for a claim placed on this node already
// exists when the node comes to make it, but another node made it (its
// node label says so: what a compromised node could do where no admission
// webhook reads the claim a new PV names; here the admin makes it). The
// node neither takes it as an
// earlier attempt of its own nor binds the claim to it: it says so in a
// Warning Event naming the PV's node, and removes the volume it made.
func TestPVMadeElsewhere(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	pvc := e.CreateClaim(controllertest.Claim{Name: "taken", Size: "16Mi"})
	// Smaller than the claim asks, so that the PV controller does not bind
	// the claim to it before this node has tried.
	req := &request{id: ownership.VolumeIDFor(pvc.UID), mode: corev1.PersistentVolumeFilesystem, size: resource.MustParse("1Mi"),
		reclaim: corev1.PersistentVolumeReclaimDelete, class: testClass(func(sc *storagev1.StorageClass) { sc.Name = e.Class })}
	foreign := buildPV(pvc, req, names.DriverName, "other-host", "other-node")
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.CoreV1().PersistentVolumes().Delete(ctx, foreign.Name, metav1.DeleteOptions{}) })

	e.start(e.controller())
	e.WaitEvent(pvc.UID, ReasonVolumeMadeElsewhere, `labelled `+ownership.LabelNode+`="other-node"`)
	controllertest.Eventually(t, 30*time.Second, "the volume made for the claim removed", func() (bool, error) {
		return len(e.VolumeIDs()) == 0, nil
	})
	if got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, pvc.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("reading the claim: %v", err)
	} else if got.Spec.VolumeName != "" {
		t.Errorf("claim bound to %q; want the node not to bind it to a PV it did not make", got.Spec.VolumeName)
	}
	if pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil || pv.Labels[ownership.LabelNode] != "other-node" {
		t.Errorf("the other node's PV after the sync: %v (%v)", pv, err)
	}
	for _, ev := range e.Events(pvc.UID) {
		if ev.Reason == ReasonProvisioningSucceeded || ev.Reason == ReasonCapacityNotEnforced {
			t.Errorf("Event %s %q: the node called the volume its own", ev.Reason, ev.Message)
		}
	}
	// Later syncs of the claim (each update) neither make a volume again
	// nor repeat the Event.
	touch := func(v string) {
		t.Helper()
		patch := []byte(`{"metadata":{"annotations":{"test.plinth.dev/touch":"` + v + `"}}}`)
		if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	touch("1")
	touch("2")
	time.Sleep(2 * time.Second)
	reported := 0
	for _, ev := range e.Events(pvc.UID) {
		if ev.Reason == ReasonVolumeMadeElsewhere {
			reported += int(max(ev.Count, 1))
		}
	}
	if reported != 1 {
		t.Errorf("VolumeMadeElsewhere reported %d times after two more syncs, want once", reported)
	}
	// Once that PV is gone, the node provisions the claim.
	if err := e.Client.CoreV1().PersistentVolumes().Delete(ctx, foreign.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "the PV of the foreign one gone", func() (bool, error) {
		_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, foreign.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	touch("3")
	controllertest.Eventually(t, 30*time.Second, "the claim bound to this node's PV", func() (bool, error) {
		pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(pvc.UID), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && pv.Labels[ownership.LabelNode] == ownership.NodeLabelValue(e.Node), err
	})
}
