package clusterobjects_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
)

// judge checks how the API server decided a write.
type judge struct{ t *testing.T }

func (j judge) allowed(what string, err error) {
	j.t.Helper()
	if err != nil {
		j.t.Errorf("%s: refused: %v", what, err)
	}
}

// refusedBy: err is a refusal whose message contains by.
func (j judge) refusedBy(by, what string, err error) {
	j.t.Helper()
	switch {
	case err == nil:
		j.t.Errorf("%s: allowed, want refused by %s", what, by)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), by):
		j.t.Errorf("%s: %v, want refused by %s", what, err, by)
	}
}

// refused: err is a refusal by the admission policy called policy.
func (j judge) refused(policy, what string, err error) {
	j.t.Helper()
	j.refusedBy(byPolicy(policy), what, err)
}

// byPolicy is how a refusal by the admission policy name begins.
func byPolicy(name string) string { return "ValidatingAdmissionPolicy '" + name + "'" }

// dryPVs writes PVs as the client c, in dry runs.
type dryPVs struct {
	ctx context.Context
	c   kubernetes.Interface
}

func (d dryPVs) createPV(p *corev1.PersistentVolume) error {
	_, err := d.c.CoreV1().PersistentVolumes().Create(d.ctx, p, metav1.CreateOptions{DryRun: dry})
	return err
}

func (d dryPVs) patchPV(name string, body []byte) error {
	_, err := d.c.CoreV1().PersistentVolumes().Patch(d.ctx, name, types.MergePatchType, body, metav1.PatchOptions{DryRun: dry})
	return err
}

func (d dryPVs) deletePV(name string) error {
	return d.c.CoreV1().PersistentVolumes().Delete(d.ctx, name, metav1.DeleteOptions{DryRun: dry})
}

// dry asks the API server to admit a request without storing it: the
// admission policy runs, nothing changes.
var dry = []string{metav1.DryRunAll}

// TestPolicyTypeChecks: the API server's type check of each policy
// (against the schema of the resource it matches) finds nothing to warn
// about: a misspelt field would otherwise only show as an error at
// admission. The check also tries a policy against the equivalent
// resources of other API groups (core Events' events.k8s.io twin); for a
// policy that matches its own group exactly those never reach it, and
// their warnings are not the policy's.
func TestPolicyTypeChecks(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	for _, name := range clusterobjects.AdmissionPolicyNames() {
		var policy *admissionv1.ValidatingAdmissionPolicy
		controllertest.Eventually(t, 30*time.Second, "the type check of policy "+name, func() (bool, error) {
			var err error
			policy, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			return err == nil && policy.Status.ObservedGeneration == policy.Generation && policy.Status.TypeChecking != nil, err
		})
		for _, w := range policy.Status.TypeChecking.ExpressionWarnings {
			if unmatched(policy, w.Warning) {
				t.Logf("policy %s, %s (a group it does not match): %s", name, w.FieldRef, w.Warning)
				continue
			}
			t.Errorf("policy %s, %s: %s", name, w.FieldRef, w.Warning)
		}
	}
}

// unmatched reports whether a type-check warning is about an API group
// policy never sees: the warning names the group first ("events.k8s.io/v1,
// Kind=Event: ..."), and the policy matches only its rules' groups.
func unmatched(policy *admissionv1.ValidatingAdmissionPolicy, warning string) bool {
	mc := policy.Spec.MatchConstraints
	if mc.MatchPolicy == nil || *mc.MatchPolicy != admissionv1.Exact {
		return false
	}
	gv, _, ok := strings.Cut(warning, ", Kind=")
	if !ok {
		return false
	}
	group, _, _ := strings.Cut(gv, "/")
	if !strings.Contains(gv, "/") {
		group = ""
	}
	for _, r := range mc.ResourceRules {
		if slices.Contains(r.APIGroups, group) {
			return false
		}
	}
	return true
}

// TestNodeWritesOwnOnly: the admission policies the control plane has
// installed (as test/launch and deploy/ install it) let node A's agent
// write what a node needs on its own objects, and refuse it node B's:
// claims placed on B, handing back B's claim or a bound one, binding a
// claim to another volume, B's PVs and capacity, and PVs not named for
// their claim. They refuse it any placement too: a node never places a
// claim, not even an unplaced claim of an Immediate class whose topology
// admits it, on itself; the admission server's placer does, with the
// control plane's identity. Each refusal must come from the policy of its
// resource (named in the error), not from RBAC, which allows all of these
// calls. What a policy cannot see is the node-writes webhook's to refuse.
func TestNodeWritesOwnOnly(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	nodeA, nodeB := e.Node, e.Node+"-b"
	a := controllertest.NodeAgentClient(t, nodeA)

	j := judge{t}
	patchClaim := func(name string, patch map[string]any, sub ...string) error {
		body, err := json.Marshal(patch)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{DryRun: dry}, sub...)
		return err
	}
	ann := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return map[string]any{"metadata": map[string]any{"annotations": m}}
	}
	bind := func(volume string) map[string]any {
		return map[string]any{"spec": map[string]any{"volumeName": volume}}
	}
	phase := map[string]any{"status": map[string]any{"phase": "Bound"}}

	mine := e.CreateClaim(controllertest.Claim{Name: "mine", Node: nodeA})
	theirs := e.CreateClaim(controllertest.Claim{Name: "theirs", Node: nodeB})
	// The admin makes claims as the PV controller and the scheduler would
	// leave them: c changes the object CreateClaim would make.
	claim := func(name string, c func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		obj := e.ClaimObject(controllertest.Claim{Name: name, Node: nodeA})
		c(obj)
		made, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return made
	}
	const otherDriver = "disk.example.com"
	// Its claims name its class, or the PV controller would rename their
	// provisioner to Plinth's (their class's) before the node writes.
	otherClass := e.NS + "-disk"
	e.CreateClassFor(otherDriver, otherClass, corev1.PersistentVolumeReclaimDelete, nil)
	// The capacity webhook reads node A's Node (its host).
	e.CreateNode(nodeA, nodeA)
	// An Immediate claim of Plinth's that the placer has not placed yet,
	// of a class whose topology admits node A: still not node A's to
	// place.
	immediate := e.Class + "-now"
	e.CreateImmediateClass(immediate, nodeA)
	unplaced0 := claim("unplaced", func(c *corev1.PersistentVolumeClaim) {
		delete(c.Annotations, ownership.AnnSelectedNode)
		c.Spec.StorageClassName = &immediate
	})
	// A claim of Plinth's WaitForFirstConsumer class handed back by its
	// node: the scheduler's to place again.
	claim("handed-back", func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, ownership.AnnSelectedNode) })
	// Another driver's claims: one placed on node A by the scheduler, one
	// bound without placement (an Immediate class).
	otherPlaced := claim("other-placed", func(c *corev1.PersistentVolumeClaim) {
		c.Annotations[ownership.AnnStorageProvisioner] = otherDriver
		c.Spec.StorageClassName = &otherClass
	})
	claim("other-bound", func(c *corev1.PersistentVolumeClaim) {
		c.Annotations = map[string]string{ownership.AnnStorageProvisioner: otherDriver}
		c.Spec.StorageClassName = &otherClass
		c.Spec.VolumeName = "disk-1"
	})
	// A claim of Plinth's class bound to a PV by hand, never placed.
	claim("plinth-bound", func(c *corev1.PersistentVolumeClaim) {
		delete(c.Annotations, ownership.AnnSelectedNode)
		c.Spec.VolumeName = "pvc-by-hand"
	})

	// A claim placed on node A and bound there.
	claim("mine-bound", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pvc-by-hand" })
	// unplace removes the selected-node annotation, with more annotations
	// set in kv.
	unplace := func(kv ...string) map[string]any {
		p := ann(kv...)
		p["metadata"].(map[string]any)["annotations"].(map[string]any)[ownership.AnnSelectedNode] = nil
		return p
	}

	// Claims.
	j.allowed("handing back its own unbound claim", patchClaim(mine.Name, unplace()))
	j.refused(clusterobjects.ClaimsPolicyName, "handing back node B's claim", patchClaim(theirs.Name, unplace()))
	j.refused(clusterobjects.ClaimsPolicyName, "handing back its own claim and changing more", patchClaim(mine.Name, unplace("other", "x")))
	j.refused(clusterobjects.ClaimsPolicyName, "handing back its own bound claim", patchClaim("mine-bound", unplace()))
	j.refused(clusterobjects.ClaimsPolicyName, "handing back another driver's claim placed on it", patchClaim(otherPlaced.Name, unplace()))
	j.allowed("binding its own claim to its volume", patchClaim(mine.Name, bind(ownership.VolumeIDFor(mine.UID))))
	j.allowed("its own claim's status", patchClaim(mine.Name, phase, "status"))
	j.refused(clusterobjects.ClaimsPolicyName, "placing an unplaced Immediate claim on itself", patchClaim("unplaced", ann(ownership.AnnSelectedNode, nodeA)))
	j.refused(clusterobjects.ClaimsPolicyName, "placing a handed-back WaitForFirstConsumer claim on itself", patchClaim("handed-back", ann(ownership.AnnSelectedNode, nodeA)))
	// The placer's identity, the admission server's, is no node agent's:
	// the policies leave its placements alone.
	placement, err := json.Marshal(ann(ownership.AnnSelectedNode, nodeA))
	if err != nil {
		t.Fatal(err)
	}
	_, err = controllertest.ControlPlane(t).AdmissionClient().CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, "unplaced",
		types.MergePatchType, placement, metav1.PatchOptions{DryRun: dry})
	j.allowed("the admission server placing an unplaced Immediate claim on node A", err)
	j.refused(clusterobjects.ClaimsPolicyName, "binding its own claim to another volume", patchClaim(mine.Name, bind(ownership.VolumeIDFor(theirs.UID))))
	j.refused(clusterobjects.ClaimsPolicyName, "moving its own claim to node B", patchClaim(mine.Name, ann(ownership.AnnSelectedNode, nodeB)))
	j.refused(clusterobjects.ClaimsPolicyName, "binding node B's claim", patchClaim(theirs.Name, bind(ownership.VolumeIDFor(theirs.UID))))
	j.refused(clusterobjects.ClaimsPolicyName, "node B's claim's status", patchClaim(theirs.Name, phase, "status"))
	j.refused(clusterobjects.ClaimsPolicyName, "taking node B's claim", patchClaim(theirs.Name, ann(ownership.AnnSelectedNode, nodeA)))
	j.refused(clusterobjects.ClaimsPolicyName, "placing an unplaced claim on node B", patchClaim("unplaced", ann(ownership.AnnSelectedNode, nodeB)))
	j.refused(clusterobjects.ClaimsPolicyName, "placing an unplaced claim and changing more", patchClaim("unplaced", ann(ownership.AnnSelectedNode, nodeA, "other", "x")))
	j.refused(clusterobjects.ClaimsPolicyName, "binding another driver's claim placed on it", patchClaim(otherPlaced.Name, bind(ownership.VolumeIDFor(otherPlaced.UID))))
	j.refused(clusterobjects.ClaimsPolicyName, "another driver's claim's status", patchClaim(otherPlaced.Name, phase, "status"))
	j.refused(clusterobjects.ClaimsPolicyName, "placing another driver's bound claim on itself", patchClaim("other-bound", ann(ownership.AnnSelectedNode, nodeA)))
	j.refused(clusterobjects.ClaimsPolicyName, "placing a bound claim on itself", patchClaim("plinth-bound", ann(ownership.AnnSelectedNode, nodeA)))
	j.refused(clusterobjects.ClaimsPolicyName, "handing its own claim to another driver", patchClaim(mine.Name, ann(ownership.AnnStorageProvisioner, otherDriver)))
	j.refused(clusterobjects.ClaimsPolicyName, "removing its own claim's finalizers", patchClaim(mine.Name, map[string]any{"metadata": map[string]any{"finalizers": nil}}))
	j.refused(clusterobjects.ClaimsPolicyName, "giving its own claim an owner", patchClaim(mine.Name, map[string]any{"metadata": map[string]any{"ownerReferences": []any{
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": string(uuid.NewUUID())},
	}}}))
	j.refused(clusterobjects.ClaimsPolicyName, "labelling its own claim", patchClaim(mine.Name, map[string]any{"metadata": map[string]any{"labels": map[string]any{"backup": "skip"}}}))

	// The node label: the claim labels put it on every claim of Plinth's
	// (the admin's creations above), and refuse anyone's change of it to
	// anything but what the claim's placement says.
	for _, c := range []struct {
		claim *corev1.PersistentVolumeClaim
		want  string
	}{{mine, ownership.NodeLabelValue(nodeA)}, {theirs, ownership.NodeLabelValue(nodeB)}, {unplaced0, ownership.LabelUnplaced}} {
		if v := c.claim.Labels[ownership.LabelNode]; v != c.want {
			t.Errorf("claim %s was created with node label %q, want %q", c.claim.Name, v, c.want)
		}
	}
	if v, ok := otherPlaced.Labels[ownership.LabelNode]; ok {
		t.Errorf("another driver's claim was created with node label %q, want none", v)
	}
	setLabel := func(v any) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{ownership.LabelNode: v}}}
	}
	labels := `admission webhook "` + clusterobjects.ClaimLabelsCheckName + `" denied the request`
	j.refusedBy(labels+": "+clusterobjects.NodeAgentUser(nodeA)+" may not set the label", "labelling its own claim as node B's", patchClaim(mine.Name, setLabel(nodeB)))
	j.refusedBy(labels, "removing its own claim's node label", patchClaim(mine.Name, setLabel(nil)))
	j.refusedBy(labels, "labelling node B's claim as its own", patchClaim(theirs.Name, setLabel(nodeA)))
	j.refusedBy(labels, "labelling another driver's claim as its own", patchClaim(otherPlaced.Name, setLabel(nodeA)))
	body, err := json.Marshal(setLabel(nodeA))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Client.CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, theirs.Name, types.MergePatchType, body, metav1.PatchOptions{DryRun: dry})
	j.refusedBy(labels, "the administrator labelling node B's claim as node A's", err)

	// PVs. The admin makes one of node B's, Released with policy Retain,
	// one Released with policy Delete (what node removal deletes), and one
	// of node A's.
	pv := func(name, node string, reclaim corev1.PersistentVolumeReclaimPolicy, claim types.UID) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
				// So the PV controller leaves a Released PV to its driver.
				Annotations: map[string]string{ownership.AnnProvisionedBy: names.DriverName},
			},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: reclaim,
				StorageClassName:              e.Class,
				// A claim that does not exist: the PV controller releases it.
				ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: e.NS, Name: "gone", UID: claim},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: name},
				},
			},
		}
	}
	pvs := e.Client.CoreV1().PersistentVolumes()
	made := map[string]*corev1.PersistentVolume{}
	// Another driver's, as its provisioner makes them: no node label.
	otherPV := pv("disk-"+e.NS, nodeB, corev1.PersistentVolumeReclaimDelete, uuid.NewUUID())
	otherPV.Labels = nil
	otherPV.Annotations[ownership.AnnProvisionedBy] = otherDriver
	otherPV.Spec.CSI.Driver = otherDriver
	for _, p := range []*corev1.PersistentVolume{
		pv("pvc-"+e.NS+"-b-retain", nodeB, corev1.PersistentVolumeReclaimRetain, uuid.NewUUID()),
		pv("pvc-"+e.NS+"-b-delete", nodeB, corev1.PersistentVolumeReclaimDelete, uuid.NewUUID()),
		pv("pvc-"+e.NS+"-a", nodeA, corev1.PersistentVolumeReclaimRetain, uuid.NewUUID()),
		otherPV,
	} {
		if _, err := pvs.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pvs.Delete(ctx, p.Name, metav1.DeleteOptions{}) })
		made[p.Name] = p
	}
	for name := range made {
		controllertest.Eventually(t, 30*time.Second, "PV "+name+" Released", func() (bool, error) {
			got, err := pvs.Get(ctx, name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.VolumeReleased, err
		})
	}
	relabel := func(node string) []byte {
		return []byte(`{"metadata":{"labels":{"` + ownership.LabelNode + `":"` + ownership.NodeLabelValue(node) + `"}}}`)
	}
	grow := []byte(`{"spec":{"capacity":{"storage":"2Mi"}}}`)
	agent := dryPVs{ctx, a}
	j.allowed("creating its PV for its claim", agent.createPV(pv(ownership.VolumeIDFor(mine.UID), nodeA, corev1.PersistentVolumeReclaimDelete, mine.UID)))
	j.allowed("growing its PV", agent.patchPV("pvc-"+e.NS+"-a", grow))
	j.allowed("deleting its PV", agent.deletePV("pvc-"+e.NS+"-a"))
	j.allowed("deleting node B's Released Delete PV", agent.deletePV("pvc-"+e.NS+"-b-delete"))
	j.refused(clusterobjects.VolumesPolicyName, "creating a PV for node B", agent.createPV(pv(ownership.VolumeIDFor(theirs.UID), nodeB, corev1.PersistentVolumeReclaimDelete, theirs.UID)))
	j.refused(clusterobjects.VolumesPolicyName, "creating a PV not named for its claim", agent.createPV(pv(ownership.VolumeIDFor(theirs.UID), nodeA, corev1.PersistentVolumeReclaimDelete, mine.UID)))
	j.refused(clusterobjects.VolumesPolicyName, "growing node B's PV", agent.patchPV("pvc-"+e.NS+"-b-retain", grow))
	j.refused(clusterobjects.VolumesPolicyName, "taking node B's PV", agent.patchPV("pvc-"+e.NS+"-b-retain", relabel(nodeA)))
	j.refused(clusterobjects.VolumesPolicyName, "giving its PV to node B", agent.patchPV("pvc-"+e.NS+"-a", relabel(nodeB)))
	j.refused(clusterobjects.VolumesPolicyName, "deleting node B's Retain PV", agent.deletePV("pvc-"+e.NS+"-b-retain"))
	j.refused(clusterobjects.VolumesPolicyName, "deleting another driver's Released Delete PV", agent.deletePV(otherPV.Name))
	// The webhook: PVs the policies admit, whose claimRef names a claim.
	forClaim := func(claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
		p := pv(ownership.VolumeIDFor(claim.UID), nodeA, corev1.PersistentVolumeReclaimDelete, claim.UID)
		p.Spec.ClaimRef.Name = claim.Name
		return p
	}
	unplaced, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, "unplaced", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webhook := `admission webhook "` + clusterobjects.WebhookCheckName + `" denied the request`
	j.allowed("creating its PV naming its claim", agent.createPV(forClaim(mine)))
	j.refusedBy(webhook+": node agent "+clusterobjects.NodeAgentUser(nodeA)+" (node "+nodeA+")", "creating a PV naming node B's claim", agent.createPV(forClaim(theirs)))
	j.refusedBy(webhook, "creating a PV naming a claim placed on no node", agent.createPV(forClaim(unplaced)))
	j.refusedBy(webhook, "creating a PV naming another driver's claim placed on it", agent.createPV(forClaim(otherPlaced)))
	stale := forClaim(theirs)
	stale.Spec.ClaimRef.UID = uuid.NewUUID()
	stale.Name, stale.Spec.CSI.VolumeHandle = ownership.VolumeIDFor(stale.Spec.ClaimRef.UID), ownership.VolumeIDFor(stale.Spec.ClaimRef.UID)
	j.allowed("creating a PV naming a claim of node B's name but another UID (one the PV controller releases)", agent.createPV(stale))
	nfs := pv(ownership.VolumeIDFor(mine.UID), nodeA, corev1.PersistentVolumeReclaimDelete, mine.UID)
	nfs.Spec.CSI = nil
	nfs.Spec.NFS = &corev1.NFSVolumeSource{Server: "attacker.example.com", Path: "/"}
	j.refused(clusterobjects.VolumesPolicyName, "creating an NFS PV for its claim", agent.createPV(nfs))
	handle := pv(ownership.VolumeIDFor(mine.UID), nodeA, corev1.PersistentVolumeReclaimDelete, mine.UID)
	handle.Spec.CSI.VolumeHandle = ownership.VolumeIDFor(theirs.UID)
	j.refused(clusterobjects.VolumesPolicyName, "creating a PV whose handle is another claim's volume", agent.createPV(handle))
	j.refused(clusterobjects.VolumesPolicyName, "pointing its PV at another claim", agent.patchPV("pvc-"+e.NS+"-a",
		[]byte(`{"spec":{"claimRef":{"name":"`+theirs.Name+`","uid":"`+string(theirs.UID)+`"}}}`)))
	j.refused(clusterobjects.VolumesPolicyName, "giving its PV a node affinity", agent.patchPV("pvc-"+e.NS+"-a",
		[]byte(`{"spec":{"nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["`+nodeB+`"]}]}]}}}}`)))

	// Capacity objects, in the namespace nodes publish in (the only one
	// where RBAC lets them create any: clusterobjects.CapacityRole).
	// owner "": none, so that the garbage collector leaves the admin's
	// object (whose owner does not exist) alone.
	capObject := func(label, owner string) *storagev1.CSIStorageCapacity {
		c := &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "cap-", Namespace: capacity.DefaultNamespace,
				Labels: map[string]string{ownership.LabelNode: ownership.NodeLabelValue(label)},
			},
			NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{names.TopologyKeyHostname: label}},
			StorageClassName: e.Class,
			Capacity:         resource.NewQuantity(1<<30, resource.BinarySI),
		}
		if owner != "" {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: owner, UID: uuid.NewUUID()}}
		}
		return c
	}
	caps := a.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace)
	createCap := func(c *storagev1.CSIStorageCapacity) error {
		_, err := caps.Create(ctx, c, metav1.CreateOptions{DryRun: dry})
		return err
	}
	j.allowed("publishing its capacity", createCap(capObject(nodeA, nodeA)))
	inUsers := capObject(nodeA, nodeA)
	inUsers.Namespace = e.NS
	_, err = a.StorageV1().CSIStorageCapacities(e.NS).Create(ctx, inUsers, metav1.CreateOptions{DryRun: dry})
	j.refusedBy(`cannot create resource "csistoragecapacities" in API group "storage.k8s.io" in the namespace "`+e.NS+`"`,
		"publishing its capacity in a users' namespace", err)
	elsewhere := capObject(nodeA, nodeA)
	elsewhere.NodeTopology.MatchLabels[names.TopologyKeyHostname] = "elsewhere"
	j.refusedBy(webhook+": node agent "+clusterobjects.NodeAgentUser(nodeA)+" (node "+nodeA+") may publish capacity only for its own host",
		"publishing capacity for another host", createCap(elsewhere))
	otherCap := capObject(nodeA, nodeA)
	otherCap.StorageClassName = otherClass
	j.refusedBy(webhook, "publishing capacity for another driver's class", createCap(otherCap))
	j.refused(clusterobjects.CapacityPolicyName, "publishing node B's capacity", createCap(capObject(nodeB, nodeB)))
	j.refused(clusterobjects.CapacityPolicyName, "publishing capacity labelled its own for node B", createCap(capObject(nodeA, nodeB)))
	j.refused(clusterobjects.CapacityPolicyName, "publishing capacity owned by no Node", createCap(capObject(nodeA, "")))
	everywhere := capObject(nodeA, nodeA)
	everywhere.NodeTopology = &metav1.LabelSelector{}
	j.refused(clusterobjects.CapacityPolicyName, "publishing its capacity for every node", createCap(everywhere))
	zone := capObject(nodeA, nodeA)
	zone.NodeTopology.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: metav1.LabelSelectorOpExists}}
	j.refused(clusterobjects.CapacityPolicyName, "publishing its capacity with more than its host", createCap(zone))
	theirCap, err := e.Client.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace).Create(ctx, capObject(nodeB, ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.StorageV1().CSIStorageCapacities(theirCap.Namespace).Delete(context.Background(), theirCap.Name, metav1.DeleteOptions{})
	})
	j.refused(clusterobjects.CapacityPolicyName, "deleting node B's capacity", caps.Delete(ctx, theirCap.Name, metav1.DeleteOptions{DryRun: dry}))
	theirCap.Capacity = resource.NewQuantity(0, resource.BinarySI)
	_, err = caps.Update(ctx, theirCap, metav1.UpdateOptions{DryRun: dry})
	j.refused(clusterobjects.CapacityPolicyName, "zeroing node B's capacity", err)
}
