package provisioner

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/volumetest"
)

// newCopyEnv is a test's world whose data directory makes copy-on-write
// copies (an XFS with reflink), in a control plane serving the snapshot
// API, with the provisioner running.
func newCopyEnv(t *testing.T) *env {
	t.Helper()
	controllertest.SnapshotAPI(t)
	e := newEnv(t, true)
	e.Vols = controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true)
	if err := e.Vols.CopyOnWriteError(); err != nil {
		t.Fatalf("the test's XFS makes no copy-on-write copies: %v", err)
	}
	e.start(e.controller())
	return e
}

// writeFile writes data into the filesystem volume of the claim pvc.
func (e *env) writeFile(pvc *corev1.PersistentVolumeClaim, name, data string) {
	e.T.Helper()
	if err := os.WriteFile(filepath.Join(e.volumePath(pvc), name), []byte(data), 0o644); err != nil {
		e.T.Fatal(err)
	}
}

// readFile reads a file of the filesystem volume of the claim pvc.
func (e *env) readFile(pvc *corev1.PersistentVolumeClaim, name string) string {
	e.T.Helper()
	b, err := os.ReadFile(filepath.Join(e.volumePath(pvc), name))
	if err != nil {
		e.T.Fatalf("reading %s of claim %s's volume: %v", name, pvc.Name, err)
	}
	return string(b)
}

func (e *env) volumePath(pvc *corev1.PersistentVolumeClaim) string {
	d, err := e.Vols.Data.Volumes.Filesystem(ownership.VolumeIDFor(pvc.UID))
	if err != nil {
		e.T.Fatal(err)
	}
	return d.FullPath()
}

// waitProvisioned waits for the Event that says the claim's volume was
// made: ProvisioningSucceeded, or, where this host cannot enforce sizes,
// CapacityNotEnforced, which says both.
func (e *env) waitProvisioned(pvc *corev1.PersistentVolumeClaim) {
	e.T.Helper()
	if e.Vols.CapacityEnforced() {
		e.WaitEvent(pvc.UID, ReasonProvisioningSucceeded, "Successfully provisioned volume")
	} else {
		e.WaitEvent(pvc.UID, ReasonCapacityNotEnforced, "Provisioned volume")
	}
}

// claimFrom is a claim of the env's node and class with a data source.
func (e *env) claimFrom(c controllertest.Claim, group *string, kind, name string) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	o := e.ClaimObject(c)
	o.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: group, Kind: kind, Name: name}
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), o, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating claim %s: %v", c.Name, err)
	}
	return pvc
}

var snapshotGroup = snapshotv1.GroupName

// TestRestoreAndCloneCopyTheSource: a claim restored from a VolumeSnapshot
// of this node gets a volume with the snapshot's data, not the source
// volume's later writes, grown to the claim's larger size; a claim cloned
// from a claim of this node gets that claim's data. Both are ordinary
// bound claims with a ProvisioningSucceeded Event.
func TestRestoreAndCloneCopyTheSource(t *testing.T) {
	e := newCopyEnv(t)
	ctx := context.Background()
	src := e.CreateClaim(controllertest.Claim{Name: "src", Size: "16Mi"})
	e.WaitBound(src.Name)
	e.writeFile(src, "data", "before the snapshot")
	snapID := "snapshot-" + string(uuid.NewUUID())
	if _, err := e.Vols.CreateSnapshot(ctx, ownership.VolumeIDFor(src.UID), snapID); err != nil {
		t.Fatal(err)
	}
	e.writeFile(src, "data", "after the snapshot")
	e.CreateSnapshot(controllertest.Snapshot{Name: "snap", Node: e.Node, Handle: snapID, RestoreBytes: 16 << 20})

	restored := e.claimFrom(controllertest.Claim{Name: "restored", Size: "32Mi"}, &snapshotGroup, "VolumeSnapshot", "snap")
	clone := e.claimFrom(controllertest.Claim{Name: "clone", Size: "16Mi"}, nil, "PersistentVolumeClaim", "src")
	_, pv := e.WaitBound(restored.Name)
	if got := e.readFile(restored, "data"); got != "before the snapshot" {
		t.Errorf("the restored volume holds %q; want the snapshot's %q", got, "before the snapshot")
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 32<<20 {
		t.Errorf("the restored volume's PV says %s; want the claim's 32Mi", q.String())
	}
	infos, err := e.Vols.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range infos {
		if v.ID == ownership.VolumeIDFor(restored.UID) && v.CapacityBytes != 32<<20 {
			t.Errorf("the restored volume is %d bytes; want the claim's %d", v.CapacityBytes, 32<<20)
		}
	}
	e.waitProvisioned(restored)
	e.WaitBound(clone.Name)
	if got := e.readFile(clone, "data"); got != "after the snapshot" {
		t.Errorf("the clone holds %q; want its source's %q", got, "after the snapshot")
	}
	e.waitProvisioned(clone)
}

// TestRestoreRefusesWhatCannotBeCopied: a claim smaller than its source,
// a clone of another volume mode, a restore of a snapshot that is not
// ready or does not exist: each gets a Warning Event that says why, and
// no volume and no PV are made. The one waiting for its snapshot is
// restored once the snapshot is ready.
func TestRestoreRefusesWhatCannotBeCopied(t *testing.T) {
	e := newCopyEnv(t)
	ctx := context.Background()
	src := e.CreateClaim(controllertest.Claim{Name: "src", Size: "16Mi"})
	e.WaitBound(src.Name)
	snapID := "snapshot-" + string(uuid.NewUUID())
	if _, err := e.Vols.CreateSnapshot(ctx, ownership.VolumeIDFor(src.UID), snapID); err != nil {
		t.Fatal(err)
	}
	e.CreateSnapshot(controllertest.Snapshot{Name: "snap", Node: e.Node, Handle: snapID, RestoreBytes: 16 << 20})
	e.CreateSnapshot(controllertest.Snapshot{Name: "pending", Node: e.Node, Handle: snapID, NotReady: true})

	small := e.claimFrom(controllertest.Claim{Name: "small", Size: "8Mi"}, &snapshotGroup, "VolumeSnapshot", "snap")
	smallClone := e.claimFrom(controllertest.Claim{Name: "small-clone", Size: "8Mi"}, nil, "PersistentVolumeClaim", "src")
	block := e.claimFrom(controllertest.Claim{Name: "block", Size: "16Mi", Mode: corev1.PersistentVolumeBlock}, nil, "PersistentVolumeClaim", "src")
	missing := e.claimFrom(controllertest.Claim{Name: "missing", Size: "16Mi"}, &snapshotGroup, "VolumeSnapshot", "nothing")
	waiting := e.claimFrom(controllertest.Claim{Name: "waiting", Size: "16Mi"}, &snapshotGroup, "VolumeSnapshot", "pending")

	e.WaitEvent(small.UID, ReasonProvisioningFailed, "The claim asks for 8Mi, less than its data source VolumeSnapshot "+e.NS+"/snap holds (16Mi)")
	e.WaitEvent(smallClone.UID, ReasonProvisioningFailed, "less than its data source PersistentVolumeClaim "+e.NS+"/src holds (16Mi)")
	e.WaitEvent(block.UID, ReasonProvisioningFailed, "The claim asks for a Block volume, but its data source PersistentVolumeClaim "+e.NS+"/src is a Filesystem volume")
	e.WaitEvent(missing.UID, ReasonProvisioningFailed, "VolumeSnapshot "+e.NS+"/nothing does not exist")
	e.WaitEvent(waiting.UID, ReasonProvisioningFailed, "Waiting for the claim's data source: VolumeSnapshot "+e.NS+"/pending: not ready yet")
	for _, c := range []*corev1.PersistentVolumeClaim{small, smallClone, block, missing, waiting} {
		e.NoPV(c.UID)
	}
	if ids := e.VolumeIDs(); len(ids) != 1 || ids[0] != ownership.VolumeIDFor(src.UID) {
		t.Errorf("volumes %v; want only the source's", ids)
	}

	// The snapshot becomes ready: the waiting claim is restored.
	contents := e.Snapshots.SnapshotV1().VolumeSnapshotContents()
	name := "content-" + e.NS + "-pending"
	content, err := contents.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := true
	content.Status.ReadyToUse = &ready
	if _, err := contents.UpdateStatus(ctx, content, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitBound(waiting.Name)
}

// TestRestoreOfAnotherNodesSnapshotIsHandedBack: a claim placed on this
// node whose snapshot is on another node is handed back with an Event
// that names the snapshot's node, makes nothing here, and the placer puts
// it on the snapshot's node.
func TestRestoreOfAnotherNodesSnapshotIsHandedBack(t *testing.T) {
	e := newCopyEnv(t)
	other := "other-" + e.NS
	e.CreateSnapshot(controllertest.Snapshot{Name: "snap", Node: other, Handle: "snapshot-" + string(uuid.NewUUID()), RestoreBytes: 16 << 20})
	pvc := e.claimFrom(controllertest.Claim{Name: "restored", Size: "16Mi"}, &snapshotGroup, "VolumeSnapshot", "snap")
	e.WaitEvent(pvc.UID, ReasonProvisioningFailed, "its data source is on another node: VolumeSnapshot "+e.NS+"/snap is on node "+other+
		"; the claim is no longer placed on this node, the placer puts it on its data source's node")
	controllertest.Eventually(t, 30*time.Second, "claim placed on "+other, func() (bool, error) {
		c, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), pvc.Name, metav1.GetOptions{})
		return err == nil && c.Annotations[ownership.AnnSelectedNode] == other, err
	})
	e.NoPV(pvc.UID)
	if ids := e.VolumeIDs(); len(ids) != 0 {
		t.Errorf("volumes %v made here; want none", ids)
	}
}

// TestCopiesInAClassWithARootDirMode: a copy's root directory is its
// source's, so a class's rootDirMode does not apply to it, and does not
// stop it: a restore into a class with rootDirMode 0770 of a snapshot of
// a default-class volume (root 0777), and a clone in that class of a
// claim of it, are bound, each with its source's root directory mode, and
// their PVs record no root directory mode (which would misdescribe them).
func TestCopiesInAClassWithARootDirMode(t *testing.T) {
	e := newCopyEnv(t)
	ctx := context.Background()
	strict := e.Class + "-strict"
	e.CreateClass(strict, corev1.PersistentVolumeReclaimDelete, map[string]string{names.ParameterRootDirMode: "0770"})
	src := e.CreateClaim(controllertest.Claim{Name: "src", Size: "16Mi"})
	strictSrc := e.CreateClaim(controllertest.Claim{Name: "strict-src", Size: "16Mi", Class: strict})
	e.WaitBound(src.Name)
	e.WaitBound(strictSrc.Name)
	snapID := "snapshot-" + string(uuid.NewUUID())
	if _, err := e.Vols.CreateSnapshot(ctx, ownership.VolumeIDFor(src.UID), snapID); err != nil {
		t.Fatal(err)
	}
	e.CreateSnapshot(controllertest.Snapshot{Name: "snap", Node: e.Node, Handle: snapID, RestoreBytes: 16 << 20})

	restored := e.claimFrom(controllertest.Claim{Name: "restored", Size: "16Mi", Class: strict}, &snapshotGroup, "VolumeSnapshot", "snap")
	clone := e.claimFrom(controllertest.Claim{Name: "clone", Size: "16Mi", Class: strict}, nil, "PersistentVolumeClaim", strictSrc.Name)
	for _, c := range []struct {
		pvc  *corev1.PersistentVolumeClaim
		mode os.FileMode
	}{{restored, 0o777}, {clone, 0o770}} {
		_, pv := e.WaitBound(c.pvc.Name)
		st, err := os.Stat(e.volumePath(c.pvc))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != c.mode {
			t.Errorf("claim %s's volume root has mode %o; want its source's %o", c.pvc.Name, got, c.mode)
		}
		if v, ok := pv.Spec.CSI.VolumeAttributes[names.ParameterRootDirMode]; ok {
			t.Errorf("claim %s's PV records root directory mode %s; a copy's is its source's", c.pvc.Name, v)
		}
	}
}
