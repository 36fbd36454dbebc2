package clusterobjects_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
)

// longNode is a node name of 80 characters, longer than a label value,
// so that its node label is a hash (ownership.NodeLabelValue).
func longNode(e *controllertest.Env, tag string) string {
	head := e.NS + "-" + tag + ".rack"
	return head + "." + strings.Repeat("x", 80-len(head)-1)
}

// TestLongNodeNamesOwnOnly: two nodes whose names (80 characters) are
// longer than a label value, so that both carry a hashed node label,
// which no admission policy can compute. Node A's agent still writes only
// its own PVs and capacity objects: the policies read the full name where
// the label has only a hash (a PV's ownership.AnnNodeName annotation, a
// capacity object's owner, its Node), and the webhook checks that a new
// object's hash is its node's. Node B's objects are made by the
// administrator as node B's agent would make them.
func TestLongNodeNamesOwnOnly(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	nodeA, nodeB := longNode(e, "a"), longNode(e, "b")
	if len(nodeA) != 80 || len(nodeB) != 80 || ownership.NodeLabelValue(nodeA) == nodeA {
		t.Fatalf("node names %q and %q: want 80 characters, hashed labels", nodeA, nodeB)
	}
	a := controllertest.NodeAgentClient(t, nodeA)
	// Their hostname labels must be label values; the capacity webhook
	// reads node A's, and node B's owns its capacity objects.
	hostA, hostB := e.NS+"-a", e.NS+"-b"
	e.CreateNode(nodeA, hostA)
	b := e.CreateNode(nodeB, hostB)

	j := judge{t}
	webhook := `admission webhook "` + clusterobjects.WebhookCheckName + `" denied the request`

	mine := e.CreateClaim(controllertest.Claim{Name: "mine", Node: nodeA})
	// pv is node's PV for claim, as its provisioner makes it.
	pv := func(node string, claim types.UID, claimName string, reclaim corev1.PersistentVolumeReclaimPolicy) *corev1.PersistentVolume {
		name := ownership.VolumeIDFor(claim)
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
				Annotations: map[string]string{
					ownership.AnnProvisionedBy: names.DriverName,
					ownership.AnnNodeName:      node,
				},
			},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: reclaim,
				StorageClassName:              e.Class,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: e.NS, Name: claimName, UID: claim},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: name},
				},
			},
		}
	}
	pvs := e.Client.CoreV1().PersistentVolumes()
	// Node B's Retain PV and node A's, each for a claim that does not
	// exist (the PV controller releases them): neither may be deleted as
	// a removed node's.
	theirPV := pv(nodeB, uuid.NewUUID(), "gone", corev1.PersistentVolumeReclaimRetain)
	myPV := pv(nodeA, uuid.NewUUID(), "gone", corev1.PersistentVolumeReclaimRetain)
	for _, p := range []*corev1.PersistentVolume{theirPV, myPV} {
		if _, err := pvs.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pvs.Delete(ctx, p.Name, metav1.DeleteOptions{}) })
	}
	writes := dryPVs{ctx, a}
	grow := []byte(`{"spec":{"capacity":{"storage":"2Mi"}}}`)
	nameIt := func(node string) []byte {
		return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, ownership.AnnNodeName, node)
	}

	j.allowed("growing its PV", writes.patchPV(myPV.Name, grow))
	j.allowed("deleting its PV", writes.deletePV(myPV.Name))
	j.allowed("creating its PV for its claim", writes.createPV(pv(nodeA, mine.UID, mine.Name, corev1.PersistentVolumeReclaimDelete)))
	j.refusedBy(byPolicy(clusterobjects.VolumesPolicyName), "growing node B's PV", writes.patchPV(theirPV.Name, grow))
	j.refusedBy(byPolicy(clusterobjects.VolumesPolicyName), "deleting node B's Retain PV", writes.deletePV(theirPV.Name))
	j.refusedBy(byPolicy(clusterobjects.VolumesPolicyName), "naming node B's PV its own", writes.patchPV(theirPV.Name, nameIt(nodeA)))
	j.refusedBy(byPolicy(clusterobjects.VolumesPolicyName), "naming its PV node B's", writes.patchPV(myPV.Name, nameIt(nodeB)))
	j.refusedBy(byPolicy(clusterobjects.VolumesPolicyName), "creating a PV named node B's", writes.createPV(pv(nodeB, mine.UID, mine.Name, corev1.PersistentVolumeReclaimDelete)))
	hashB := pv(nodeA, mine.UID, mine.Name, corev1.PersistentVolumeReclaimDelete)
	hashB.Labels[ownership.LabelNode] = ownership.NodeLabelValue(nodeB)
	j.refusedBy(webhook, "creating a PV named its own but labelled with node B's hash", writes.createPV(hashB))

	// Capacity objects, as package capacity writes them: owned by their
	// Node, in the namespace the nodes publish in.
	capObject := func(node *corev1.Node, host string) *storagev1.CSIStorageCapacity {
		return &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "cap-", Namespace: capacity.DefaultNamespace,
				Labels:          map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node.Name)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{names.TopologyKeyHostname: host}},
			StorageClassName: e.Class,
			Capacity:         resource.NewQuantity(1<<30, resource.BinarySI),
		}
	}
	nodeAObj, err := e.Client.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin := e.Client.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace)
	made := func(c *storagev1.CSIStorageCapacity) *storagev1.CSIStorageCapacity {
		c, err := admin.Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), c.Name, metav1.DeleteOptions{}) })
		return c
	}
	theirCap, myCap := made(capObject(b, hostB)), made(capObject(nodeAObj, hostA))
	caps := a.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace)
	update := func(c *storagev1.CSIStorageCapacity, change func(*storagev1.CSIStorageCapacity)) error {
		c = c.DeepCopy()
		change(c)
		_, err := caps.Update(ctx, c, metav1.UpdateOptions{DryRun: dry})
		return err
	}
	zero := func(c *storagev1.CSIStorageCapacity) { c.Capacity = resource.NewQuantity(0, resource.BinarySI) }
	takeOver := func(c *storagev1.CSIStorageCapacity) {
		zero(c)
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeA, UID: nodeAObj.UID}}
	}
	_, err = caps.Create(ctx, capObject(nodeAObj, hostA), metav1.CreateOptions{DryRun: dry})
	j.allowed("publishing its capacity", err)
	j.allowed("zeroing its capacity", update(myCap, zero))
	j.allowed("deleting its capacity", caps.Delete(ctx, myCap.Name, metav1.DeleteOptions{DryRun: dry}))
	j.refusedBy(byPolicy(clusterobjects.CapacityPolicyName), "zeroing node B's capacity", update(theirCap, zero))
	j.refusedBy(byPolicy(clusterobjects.CapacityPolicyName), "taking node B's capacity as its own", update(theirCap, takeOver))
	j.refusedBy(byPolicy(clusterobjects.CapacityPolicyName), "deleting node B's capacity", caps.Delete(ctx, theirCap.Name, metav1.DeleteOptions{DryRun: dry}))
	relabelled := capObject(nodeAObj, hostA)
	relabelled.Labels[ownership.LabelNode] = ownership.NodeLabelValue(nodeB)
	_, err = caps.Create(ctx, relabelled, metav1.CreateOptions{DryRun: dry})
	j.refusedBy(webhook, "publishing its capacity labelled with node B's hash", err)
	j.refusedBy(byPolicy(clusterobjects.CapacityPolicyName), "labelling its capacity with node B's hash", update(myCap, func(c *storagev1.CSIStorageCapacity) {
		c.Labels[ownership.LabelNode] = ownership.NodeLabelValue(nodeB)
	}))

	// The administrator's writes are not the policies' to judge.
	_, err = pvs.Patch(ctx, theirPV.Name, types.MergePatchType, grow, metav1.PatchOptions{DryRun: dry})
	j.allowed("the administrator growing node B's PV", err)
}

// TestLongNodeNamesBackfilled: a long-named node's PV made by a Plinth
// that wrote no ownership.AnnNodeName is no node's to change, its own
// included, until the admission server's backfill, with its own identity,
// names the node whose name hashes to the PV's label; then its node may
// change it, and no other. A PV whose hash is no Node's (a removed node)
// is left alone, and a second backfill changes nothing.
func TestLongNodeNamesBackfilled(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	nodeA, nodeB, gone := longNode(e, "a"), longNode(e, "b"), longNode(e, "gone")
	e.CreateNode(nodeA, e.NS+"-a")
	e.CreateNode(nodeB, e.NS+"-b")
	a, b := controllertest.NodeAgentClient(t, nodeA), controllertest.NodeAgentClient(t, nodeB)

	pvs := e.Client.CoreV1().PersistentVolumes()
	earlier := func(node string) *corev1.PersistentVolume {
		name := ownership.VolumeIDFor(uuid.NewUUID())
		p := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
				Annotations: map[string]string{ownership.AnnProvisionedBy: names.DriverName},
			},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              e.Class,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: name},
				},
			},
		}
		made, err := pvs.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pvs.Delete(ctx, p.Name, metav1.DeleteOptions{}) })
		return made
	}
	mine, orphan := earlier(nodeA), earlier(gone)
	grow := func(agent kubernetes.Interface, name string) error {
		_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"capacity":{"storage":"2Mi"}}}`), metav1.PatchOptions{DryRun: dry})
		return err
	}
	if err := grow(a, mine.Name); !apierrors.IsForbidden(err) {
		t.Errorf("growing its PV written without its name, before the backfill: %v, want refused", err)
	}

	n, err := admission.AnnotateVolumes(ctx, controllertest.ControlPlane(t).AdmissionClient())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the backfill named the node of %d PVs", n)
	got, err := pvs.Get(ctx, mine.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[ownership.AnnNodeName]; v != nodeA {
		t.Errorf("PV of node A after the backfill names node %q, want %q", v, nodeA)
	}
	if err := grow(a, mine.Name); err != nil {
		t.Errorf("growing its PV after the backfill: refused: %v", err)
	}
	if err := grow(b, mine.Name); !apierrors.IsForbidden(err) {
		t.Errorf("node B growing node A's PV after the backfill: %v, want refused", err)
	}
	if got, err := pvs.Get(ctx, orphan.Name, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if v, ok := got.Annotations[ownership.AnnNodeName]; ok {
		t.Errorf("the PV of a node that has no Node was given node name %q", v)
	}
	if again, err := admission.AnnotateVolumes(ctx, controllertest.ControlPlane(t).AdmissionClient()); err != nil || again != 0 {
		t.Errorf("a second backfill named %d PVs (%v); want none", again, err)
	}
}
