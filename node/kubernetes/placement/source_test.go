package placement_test

import (
	"context"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/placement"
	"source.plinth.dev/test/controllertest"
)

// sourcedClaim creates a user's claim of class with a data source; with
// provisioner, it carries the storage-provisioner annotation the PV
// controller gives a claim of Immediate class at once, and one of
// WaitForFirstConsumer class once a node was selected for it (so an
// unplaced one is one a node handed back).
func sourcedClaim(e *controllertest.Env, name, class, size string, provisioner bool, group *string, kind, source string) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	pvc := userClaimObject(e, name, class, size)
	pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: group, Kind: kind, Name: source}
	if provisioner {
		pvc.Annotations = map[string]string{ownership.AnnStorageProvisioner: names.DriverName}
	}
	return createClaimObject(e, pvc)
}

var snapshotGroup = snapshotv1.GroupName

// TestClaimFromSnapshotIsPlacedOnItsNode: a claim restored from a
// VolumeSnapshot is placed on the node that holds the snapshot (its
// content's managed-by label), not on the node with the most room, with a
// PlacedOnNode Event that says why; so is one of a WaitForFirstConsumer
// class that a node handed back. A claim whose snapshot is not ready
// waits with a NotPlaced Event and is placed once it is; one whose
// snapshot does not exist, or names no node, is not placed, and its
// NotPlaced Event says why.
func TestClaimFromSnapshotIsPlacedOnItsNode(t *testing.T) {
	controllertest.SnapshotAPI(t)
	e := controllertest.NewEnv(t, true)
	class := "imm-" + e.NS
	e.CreateImmediateClass(class)
	nodes := fleet(e, e.NS, class, []string{"100Gi", "1Gi"})
	holder := nodes[1] // the node with less room: capacity would choose the other
	e.CreateSnapshot(controllertest.Snapshot{Name: "snap", Node: holder, Handle: "snapshot-a", RestoreBytes: 1 << 20})
	e.CreateSnapshot(controllertest.Snapshot{Name: "pending", Node: holder, Handle: "snapshot-b", NotReady: true})
	e.CreateSnapshot(controllertest.Snapshot{Name: "nowhere", Handle: "snapshot-c"})

	restored := sourcedClaim(e, "restored", class, "1Gi", false, &snapshotGroup, "VolumeSnapshot", "snap")
	handedBack := sourcedClaim(e, "handed-back", e.Class, "1Gi", true, &snapshotGroup, "VolumeSnapshot", "snap")
	waiting := sourcedClaim(e, "waiting", class, "1Gi", false, &snapshotGroup, "VolumeSnapshot", "pending")
	missing := sourcedClaim(e, "missing", class, "1Gi", false, &snapshotGroup, "VolumeSnapshot", "nothing")
	noNode := sourcedClaim(e, "no-node", class, "1Gi", false, &snapshotGroup, "VolumeSnapshot", "nowhere")

	for _, c := range []*corev1.PersistentVolumeClaim{restored, handedBack} {
		if node := placedOn(e, c.Name); node != holder {
			t.Errorf("claim %s placed on node %s; want %s, which holds its snapshot", c.Name, node, holder)
		}
		e.WaitEvent(c.UID, placement.ReasonPlaced, "The claim is made from VolumeSnapshot "+e.NS+"/snap, which is on node "+holder)
	}
	e.WaitEvent(waiting.UID, placement.ReasonNotPlaced, "Waiting for the claim's data source: VolumeSnapshot "+e.NS+"/pending: not ready yet")
	e.WaitEvent(missing.UID, placement.ReasonNotPlaced, "VolumeSnapshot "+e.NS+"/nothing does not exist")
	e.WaitEvent(noNode.UID, placement.ReasonNotPlaced, "names no node (label snapshot.storage.kubernetes.io/managed-by)")

	setReady(t, e, "content-"+e.NS+"-pending")
	if node := placedOn(e, waiting.Name); node != holder {
		t.Errorf("claim %s placed on node %s once its snapshot was ready; want %s", waiting.Name, node, holder)
	}
	for _, c := range []*corev1.PersistentVolumeClaim{missing, noNode} {
		got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), c.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node := got.Annotations[ownership.AnnSelectedNode]; node != "" {
			t.Errorf("claim %s, whose source cannot be copied, placed on node %s", c.Name, node)
		}
	}
}

// setReady marks the VolumeSnapshotContent name ready to use, as the
// node's snapshot controller does once the snapshot is made.
func setReady(t *testing.T, e *controllertest.Env, name string) {
	t.Helper()
	contents := e.Snapshots.SnapshotV1().VolumeSnapshotContents()
	c, err := contents.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := true
	c.Status.ReadyToUse = &ready
	if _, err := contents.UpdateStatus(context.Background(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCloneIsPlacedOnItsSourcesNode: a claim cloned from a bound claim
// of its namespace and class is placed on the node of the source's PV
// (its node-name annotation), whatever the room elsewhere; a clone of a
// claim of another class is not placed, and its Event says why.
func TestCloneIsPlacedOnItsSourcesNode(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	class := "imm-" + e.NS
	e.CreateImmediateClass(class)
	nodes := fleet(e, e.NS, class, []string{"100Gi", "1Gi"})
	holder := nodes[1]
	boundClaim(t, e, "src", class, holder)

	clone := sourcedClaim(e, "clone", class, "1Gi", false, nil, "PersistentVolumeClaim", "src")
	if node := placedOn(e, clone.Name); node != holder {
		t.Errorf("clone placed on node %s; want %s, where its source's volume is", node, holder)
	}
	e.WaitEvent(clone.UID, placement.ReasonPlaced, "The claim is made from PersistentVolumeClaim "+e.NS+"/src, which is on node "+holder)

	other := "other-" + e.NS
	e.CreateImmediateClass(other)
	wrong := sourcedClaim(e, "wrong-class", other, "1Gi", false, nil, "PersistentVolumeClaim", "src")
	e.WaitEvent(wrong.UID, placement.ReasonNotPlaced, "is of StorageClass \""+class+"\", not the claim's \""+other+"\"")
}

// boundClaim makes claim name of class bound to a PV of Plinth's that node
// made (as its provisioner makes them), without a node agent: the PV
// names the claim, the claim the PV, and the PV controller binds them.
func boundClaim(t *testing.T, e *controllertest.Env, name, class, node string) {
	t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	made, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := ownership.VolumeIDFor(made.UID)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        id,
			Labels:      map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
			Annotations: map[string]string{ownership.AnnProvisionedBy: names.DriverName, ownership.AnnNodeName: node},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: e.NS, Name: name, UID: made.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: id}},
		},
	}
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.CoreV1().PersistentVolumes().Delete(context.Background(), id, metav1.DeleteOptions{})
	})
	controllertest.Eventually(t, 30*time.Second, "claim "+name+" bound", func() (bool, error) {
		c, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, name, metav1.GetOptions{})
		return err == nil && c.Spec.VolumeName == id && c.Status.Phase == corev1.ClaimBound, err
	})
}
