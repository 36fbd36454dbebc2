package clusterobjects

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

// The admission policies (and their bindings) that keep each node agent to
// its own node's objects: one per resource, so that the API server type
// checks each policy's expressions against that resource's schema.
const (
	ClaimsPolicyName           = "plinth-node-claims"
	VolumesPolicyName          = "plinth-node-volumes"
	CapacityPolicyName         = "plinth-node-capacity"
	EventsPolicyName           = "plinth-node-events"
	SnapshotContentsPolicyName = "plinth-node-snapshot-contents"
)

const (
	// NodeAgentUserPrefix starts the user name of a node agent's client
	// certificate; the node's name follows (NodeAgentUser). The admission
	// policies read the node from it.
	NodeAgentUserPrefix = "system:plinth-node:"

	// DaemonSetNamespace and DaemonSetServiceAccount are the service
	// account plinth-node runs as when deployed as a DaemonSet (deploy/).
	// Its tokens are bound to the pod, and the API server adds the pod's
	// node to the user it authenticates (extra key nodeNameExtra), which
	// is where the admission policies read the node from.
	DaemonSetNamespace      = "plinth-system"
	DaemonSetServiceAccount = "plinth-node"

	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// NodeAgentUser is the user name of the node agent of node, as its client
// certificate's common name carries it.
func NodeAgentUser(node string) string { return NodeAgentUserPrefix + node }

// DaemonSetUser is the user name the API server gives the DaemonSet's
// service account.
func DaemonSetUser() string {
	return "system:serviceaccount:" + DaemonSetNamespace + ":" + DaemonSetServiceAccount
}

// AdmissionPolicyNames names the policies of AdmissionPolicies, and their
// bindings, which have the same names.
func AdmissionPolicyNames() []string {
	return []string{ClaimsPolicyName, VolumesPolicyName, CapacityPolicyName, EventsPolicyName, SnapshotContentsPolicyName}
}

// AdmissionPolicies narrow what RBAC grants a node agent to its own node.
// RBAC cannot: it knows resources and names, not which node an object
// belongs to, and every node agent needs to write claims, PVs and
// capacity objects. Without the policies, one compromised node could bind
// any claim in the cluster, move a claim's placement to itself, or delete
// another node's volumes. With them, a node agent may:
//   - claims (ClaimsPolicyName): touch only claims that ask Plinth's
//     driver for a volume (the storage-provisioner annotation, as
//     ownership.OwnsClaim reads it), before and after the change; change
//     (spec or status) only such a claim placed on its node (the
//     selected-node annotation names it), keeping it there and keeping
//     what the node never writes (the requested size, volume attributes
//     class, labels, finalizers and owners), the node label
//     (ownership.LabelNode) excepted, which must say where the claim is
//     placed (ownership.ClaimLabel: ClaimLabelsWebhook writes it, in the
//     same write, before the policy sees it); bind one only to the PV
//     provisioned for it (pvc-<claim UID>); and hand back an unbound
//     claim placed on it by removing the selected-node annotation and
//     changing nothing else (provisioner handBack). It places no claim,
//     on itself or elsewhere (below);
//   - PVs (VolumesPolicyName): create one of Plinth's CSI driver, labelled
//     as its node's (ownership.LabelNode) and naming no other node in its
//     ownership.AnnNodeName annotation, named for the claim it refers to
//     and with that name as its volume handle; change only its node's,
//     keeping the label, the annotation, the claim it refers to and its
//     node affinity; delete its node's, or a PV of Plinth's driver
//     labelled with a node that is Released with reclaim policy Delete
//     (what node removal deletes for a node that is gone);
//   - CSIStorageCapacity (CapacityPolicyName): create, update and delete
//     only objects labelled as its node's and owned by its Node (before
//     and after a change, keeping the label), whose topology is one host
//     (a kubernetes.io/hostname label and nothing else);
//   - VolumeSnapshotContents (SnapshotContentsPolicyName): change only
//     those labelled ownership.LabelSnapshotManagedBy=<its node> (which
//     the snapshot-controller sets to the node of the source volume),
//     keeping their labels, owners and spec, adding no finalizer: what the
//     snapshot protocol has a node write is a mark, the status and the
//     removal of the finalizer (package snapshots). A node could otherwise
//     declare another node's snapshot ready, or drop its finalizer so that
//     its VolumeSnapshot goes while the snapshot stays. The label is the
//     node's name, never a hash (the snapshot-controller writes it), so
//     the policy checks it whole;
//   - Events (EventsPolicyName): create and update only Events that say
//     they come from its node (source.host, which controller.NewRecorder
//     sets) and are about a claim, a PV, a VolumeSnapshotContent or its
//     own Node. A node could otherwise speak for another (a forged
//     NodeRemoved telling users to delete their claims) or about anything
//     in the cluster; what it may still say about any claim or content,
//     it says under its own name.
//
// The node is the user name after NodeAgentUserPrefix (a client
// certificate), or the node the service account token of a DaemonSet pod
// is bound to. A node agent whose identity names no node writes none of
// these.
//
// Nodes whose names are longer than a label value (63 characters) carry
// a hashed label (ownership.NodeLabelValue) that a policy cannot compute,
// and which it therefore checks only by its form. What proves such a
// node's ownership is its full name: a PV's ownership.AnnNodeName
// annotation, which the PV must then have (ownVolume), and a capacity
// object's owner, its Node (ownCapacity); both are kept as they were
// created. The webhook checks that a new object's hash is its node's.
// A long-named node's PVs made by a Plinth that wrote no annotation are
// no node's to change until the admission server annotates them (package
// admission's AnnotateVolumes). TestLongNodeNamesOwnOnly checks all this
// for two nodes of 80 characters.
//
// A policy sees only the object it admits, so two rules are the
// admission webhook's (NodeWritesWebhook, package admission), where the
// control plane runs it:
//   - a PV is created with a claimRef, and the PV controller binds a
//     pending claim to a PV that names it; the policy checks that the PV
//     is its node's and Plinth's, the webhook that the claim is placed on
//     the node and asks Plinth's driver. (The node the claim is placed on,
//     if it finds such a PV when it comes to make its own, leaves it alone
//     and reports it: provisioner's madeElsewhere.)
//   - a capacity object names a host and a StorageClass; the policy
//     checks that it names one host, the webhook that it is the Node's
//     hostname label and that the class is Plinth's.
//
// The webhook also checks that a new PV's or capacity object's node label
// is its node's, which for a long name the policies cannot (above).
//
// A claim's placement needs no webhook: no node agent ever places a
// claim, and the claims policy refuses every placement one tries. The
// scheduler places the claims of a WaitForFirstConsumer class, and the
// admission server's placer (package placement, which plinth-node
// admission-serve runs with the control plane's identity, outside these
// policies) those of an Immediate class. A node that could place a claim
// could draw it, and its pods with their secrets, to itself.
func AdmissionPolicies() []*admissionv1.ValidatingAdmissionPolicy {
	return []*admissionv1.ValidatingAdmissionPolicy{claimsPolicy(), volumesPolicy(), capacityPolicy(), eventsPolicy(), snapshotContentsPolicy()}
}

// writeOps are the operations the PV and capacity policies judge.
func writeOps() []admissionv1.OperationType {
	return []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}
}

// annotations is a CEL expression: the annotations of obj, {} if none.
func annotations(obj string) string { return obj + ".metadata.?annotations.orValue({})" }

// same is a CEL expression: each of fields (CEL paths below object and
// oldObject) is as it was.
func same(fields ...string) string {
	var eq []string
	for _, f := range fields {
		eq = append(eq, fmt.Sprintf("object.%[1]s == oldObject.%[1]s", f))
	}
	return strings.Join(eq, " && ")
}

// ours is a CEL expression: the PV obj is of Plinth's CSI driver.
func ours(obj string) string {
	return fmt.Sprintf("%s.spec.?csi.driver.orValue('') == '%s'", obj, names.DriverName)
}

// claimsPolicy is ClaimsPolicyName (see AdmissionPolicies).
func claimsPolicy() *admissionv1.ValidatingAdmissionPolicy {
	volumeID := ownership.VolumeIDFor("")
	return policy(ClaimsPolicyName, admissionv1.Rule{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "persistentvolumeclaims/status"}},
		[]admissionv1.OperationType{admissionv1.Update},
		[]admissionv1.Variable{
			{Name: "oldSelected", Expression: selectedNode("oldObject")},
			{Name: "newSelected", Expression: selectedNode("object")},
			// The claim asks Plinth for its volume, before and after:
			// a node never writes another driver's claims.
			{Name: "plinth", Expression: fmt.Sprintf("%s == '%s' && %s == '%s'",
				claimProvisioner("oldObject"), names.DriverName, claimProvisioner("object"), names.DriverName)},
			// What the node never writes on a claim, placed or not.
			// The node label is the claim-labels webhook's, which runs
			// before this policy and changes it with the placement.
			{Name: "kept", Expression: same("spec.?resources", "spec.?volumeAttributesClassName",
				"metadata.?finalizers", "metadata.?ownerReferences") + " && " + sameLabelsBut("oldObject", "object", ownership.LabelNode) +
				" && " + sameLabelsBut("object", "oldObject", ownership.LabelNode)},
			// The node label says where the claim is placed, as
			// ownership.ClaimLabel derives it (a hashed name only by
			// its form).
			{Name: "labelled", Expression: fmt.Sprintf("object.metadata.?labels[?'%[1]s'].orValue('') == "+
				"(variables.newSelected == '' ? '%[2]s' : variables.newSelected) || "+
				"size(variables.newSelected) > %[3]d && object.metadata.?labels[?'%[1]s'].orValue('').matches('%[4]s')",
				ownership.LabelNode, ownership.LabelUnplaced, validation.LabelValueMaxLength, ownership.HashedLabelPattern)},
			// An unbound claim placed on the node handed back (the
			// selected-node annotation removed) and nothing else
			// changed. Its reverse, a placement, is never a node's.
			{Name: "onlyUnplaced", Expression: "variables.oldSelected == variables.node && variables.newSelected == '' && " +
				"oldObject.spec.?volumeName.orValue('') == '' && " + same("spec", "?status") + " && " +
				fmt.Sprintf("size(%s) + 1 == size(%s) && %s.all(k, k in %s && %s[k] == %s[k])",
					annotations("object"), annotations("oldObject"), annotations("object"), annotations("oldObject"), annotations("object"), annotations("oldObject"))},
		},
		[]admissionv1.Validation{{
			Expression: "variables.plinth && variables.kept && variables.labelled && (" +
				"(variables.oldSelected == variables.node && variables.newSelected == variables.node) || " +
				"(request.?subResource.orValue('') == '' && variables.onlyUnplaced))",
			MessageExpression: refusal(fmt.Sprintf("may change only claims for %s placed on its node, and not their size, labels, finalizers or owners, nor write a node label that disagrees with their placement, "+
				"and hand back an unbound one placed on it, changing nothing else; it never places a claim (the admission server's placer does)", names.DriverName)),
		}, {
			Expression: fmt.Sprintf("object.spec.?volumeName.orValue('') == oldObject.spec.?volumeName.orValue('') || "+
				"object.spec.?volumeName.orValue('') == '%s' + object.metadata.uid", volumeID),
			MessageExpression: refusal(fmt.Sprintf("may bind a claim only to the volume made for it, %s<claim UID>", volumeID)),
		}})
}

// volumesPolicy is VolumesPolicyName (see AdmissionPolicies).
func volumesPolicy() *admissionv1.ValidatingAdmissionPolicy {
	volumeID := ownership.VolumeIDFor("")
	return policy(VolumesPolicyName, admissionv1.Rule{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}}, writeOps(), nil,
		[]admissionv1.Validation{{
			Expression: "request.operation != 'CREATE' || " + ownVolume("object") + " && " + ours("object") + " && " +
				fmt.Sprintf("object.metadata.name == '%s' + object.spec.?claimRef.uid.orValue('') && ", volumeID) +
				"object.spec.csi.volumeHandle == object.metadata.name",
			MessageExpression: refusal(fmt.Sprintf("may create only PVs of driver %s labelled %s=<its node> (annotated %s=<its node> if its name is longer than a label), named %s<UID of the claim they refer to> and with that name as volume handle",
				names.DriverName, ownership.LabelNode, ownership.AnnNodeName, volumeID)),
		}, {
			Expression: "request.operation != 'UPDATE' || " + ownVolume("oldObject") + " && " +
				fmt.Sprintf("object.metadata.?labels[?'%[1]s'] == oldObject.metadata.?labels[?'%[1]s'] && ", ownership.LabelNode) +
				fmt.Sprintf("object.metadata.?annotations[?'%[1]s'] == oldObject.metadata.?annotations[?'%[1]s'] && ", ownership.AnnNodeName) +
				same("spec.?claimRef", "spec.?nodeAffinity"),
			MessageExpression: refusal(fmt.Sprintf("may change only its node's PVs, and not their node label, %s annotation, claim or node affinity", ownership.AnnNodeName)),
		}, {
			Expression: "request.operation != 'DELETE' || " + ownVolume("oldObject") + " || " +
				fmt.Sprintf("(%s && oldObject.metadata.?labels[?'%s'].orValue('') != '' && ", ours("oldObject"), ownership.LabelNode) +
				"oldObject.status.?phase.orValue('') == 'Released' && oldObject.spec.?persistentVolumeReclaimPolicy.orValue('') == 'Delete')",
			MessageExpression: refusal(fmt.Sprintf("may delete only its node's PVs, or a Released PV of driver %s labelled with a node whose reclaim policy is Delete", names.DriverName)),
		}})
}

// capacityPolicy is CapacityPolicyName (see AdmissionPolicies).
func capacityPolicy() *admissionv1.ValidatingAdmissionPolicy {
	return policy(CapacityPolicyName, admissionv1.Rule{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}}, writeOps(), nil,
		[]admissionv1.Validation{{
			Expression: "(request.operation == 'CREATE' || " + ownCapacity("oldObject") + ") && " +
				"(request.operation == 'DELETE' || " + ownCapacity("object") + " && " +
				"size(object.?nodeTopology.matchExpressions.orValue([])) == 0 && " +
				fmt.Sprintf("object.?nodeTopology.matchLabels.orValue({}).size() == 1 && '%s' in object.?nodeTopology.matchLabels.orValue({})) && ", names.TopologyKeyHostname) +
				fmt.Sprintf("(request.operation != 'UPDATE' || object.metadata.?labels[?'%[1]s'] == oldObject.metadata.?labels[?'%[1]s'])", ownership.LabelNode),
			MessageExpression: refusal(fmt.Sprintf("may write only CSIStorageCapacity objects labelled %s=<its node>, owned by its Node (before and after) and for one host (%s, nothing else), and not change their node label",
				ownership.LabelNode, names.TopologyKeyHostname)),
		}})
}

// snapshotContentsPolicy is SnapshotContentsPolicyName (see
// AdmissionPolicies). RBAC grants a node patch, and nothing else that
// writes, on contents and their status: UPDATE is all there is to judge.
func snapshotContentsPolicy() *admissionv1.ValidatingAdmissionPolicy {
	return policy(SnapshotContentsPolicyName, admissionv1.Rule{APIGroups: []string{snapshotGroup},
		Resources: []string{"volumesnapshotcontents", "volumesnapshotcontents/status"}},
		[]admissionv1.OperationType{admissionv1.Update}, nil,
		[]admissionv1.Validation{{
			Expression: fmt.Sprintf("oldObject.metadata.?labels[?'%s'].orValue('') == variables.node && ", ownership.LabelSnapshotManagedBy) +
				same("spec", "metadata.?labels", "metadata.?ownerReferences") + " && " +
				"object.metadata.?finalizers.orValue([]).all(f, f in oldObject.metadata.?finalizers.orValue([]))",
			MessageExpression: refusal(fmt.Sprintf("may change only the VolumeSnapshotContents labelled %s=<its node>, and not their labels, owners or spec, nor add a finalizer",
				ownership.LabelSnapshotManagedBy)),
		}})
}

// eventsPolicy is EventsPolicyName (see AdmissionPolicies). The kinds are
// what the controllers write Events on; a Node's must be the node's own.
//
// It matches core/v1 Events exactly, not their equivalent in
// events.k8s.io/v1, whose schema names these fields differently (so the
// API server's type check refuses the expression there). The node agents'
// ClusterRole grants no rights on events.k8s.io, so no Event reaches the
// API server that way (TestNodeEventsOwnOnly checks).
func eventsPolicy() *admissionv1.ValidatingAdmissionPolicy {
	p := policy(EventsPolicyName, admissionv1.Rule{APIGroups: []string{""}, Resources: []string{"events"}},
		[]admissionv1.OperationType{admissionv1.Create, admissionv1.Update}, nil,
		[]admissionv1.Validation{{
			Expression: "object.?source.host.orValue('') == variables.node && (" +
				"object.involvedObject.?kind.orValue('') in ['PersistentVolumeClaim', 'PersistentVolume', 'VolumeSnapshotContent'] || " +
				"object.involvedObject.?kind.orValue('') == 'Node' && object.involvedObject.?name.orValue('') == variables.node)",
			MessageExpression: refusal("may write only Events whose source host is its node, about a claim, a PV, a VolumeSnapshotContent or its own Node"),
		}})
	exact := admissionv1.Exact
	p.Spec.MatchConstraints.MatchPolicy = &exact
	return p
}

// policy is one of AdmissionPolicies: rule and ops for node agents, the
// variable "node" (the requesting node) before vars, and a first check
// that there is one before checks. Every check's refusal is Forbidden.
func policy(name string, rule admissionv1.Rule, ops []admissionv1.OperationType, vars []admissionv1.Variable, checks []admissionv1.Validation) *admissionv1.ValidatingAdmissionPolicy {
	all := admissionv1.AllScopes
	rule.APIVersions, rule.Scope = []string{"v1"}, &all
	node := admissionv1.Variable{Name: "node", Expression: fmt.Sprintf(
		"request.userInfo.username.startsWith('%[1]s') ? request.userInfo.username.substring(%[2]d) : request.userInfo.?extra[?'%[3]s'].orValue(['']).join('')",
		NodeAgentUserPrefix, len(NodeAgentUserPrefix), nodeNameExtra)}
	checks = append([]admissionv1.Validation{{
		Expression:        "variables.node != ''",
		MessageExpression: "'node agent ' + request.userInfo.username + ' names no node: it may not write claims, PVs, capacity, snapshot contents or Events'",
	}}, checks...)
	return denyPolicy(name, admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{Operations: ops, Rule: rule}},
		nodeAgents(), append([]admissionv1.Variable{node}, vars...), checks)
}

// denyPolicy is a policy called name over rule, for the requests that
// match, refusing what one of checks refuses, as Forbidden. The fields the
// API server would default are set, so that what is read back (Ensure,
// the manifests' tests) equals this.
func denyPolicy(name string, rule admissionv1.NamedRuleWithOperations, match admissionv1.MatchCondition,
	vars []admissionv1.Variable, checks []admissionv1.Validation) *admissionv1.ValidatingAdmissionPolicy {
	fail, equivalent := admissionv1.Fail, admissionv1.Equivalent
	forbidden := metav1.StatusReasonForbidden
	for i := range checks {
		checks[i].Reason = &forbidden
	}
	return &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelManagedBy: managedBy}},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       &equivalent,
				ResourceRules:     []admissionv1.NamedRuleWithOperations{rule},
			},
			MatchConditions: []admissionv1.MatchCondition{match},
			Variables:       vars,
			Validations:     checks,
		},
	}
}

// nodeAgents is the match condition of the policies and the webhook: the
// request is a node agent's (IdentityOf's Restricted).
func nodeAgents() admissionv1.MatchCondition {
	return admissionv1.MatchCondition{
		Name:       "node-agents",
		Expression: fmt.Sprintf("'%s' in request.userInfo.groups || request.userInfo.username == '%s'", NodeAgentGroup, DaemonSetUser()),
	}
}

// sameLabelsBut is a CEL expression: every label of a but key is on b
// with the same value.
func sameLabelsBut(a, b, key string) string {
	return fmt.Sprintf("%[1]s.metadata.?labels.orValue({}).all(k, k == '%[3]s' || k in %[2]s.metadata.?labels.orValue({}) && %[2]s.metadata.labels[k] == %[1]s.metadata.labels[k])",
		a, b, key)
}

// selectedNode is a CEL expression: the node the claim obj is placed on
// (its selected-node annotation), or the empty string if none.
func selectedNode(obj string) string {
	return fmt.Sprintf("%s.metadata.?annotations[?'%s'].orValue('')", obj, ownership.AnnSelectedNode)
}

// claimProvisioner is a CEL expression, ownership.ClaimProvisioner of
// the claim obj: the GA annotation if the claim has it, else the beta one.
func claimProvisioner(obj string) string {
	return fmt.Sprintf("%[1]s.metadata.?annotations[?'%[2]s'].orValue(%[1]s.metadata.?annotations[?'%[3]s'].orValue(''))",
		obj, ownership.AnnStorageProvisioner, ownership.AnnBetaStorageProvisioner)
}

// ownLabel is a CEL expression: obj carries its node's label for the
// requesting node. For a node whose name is longer than a label value the
// label is a hash (ownership.NodeLabelValue) that CEL cannot compute, so
// it is checked only by its form, and never proves alone that obj is the
// node's: ownVolume and ownCapacity add what names the node in full.
func ownLabel(obj string) string {
	label := fmt.Sprintf("%s.metadata.?labels[?'%s'].orValue('')", obj, ownership.LabelNode)
	return fmt.Sprintf("(size(variables.node) <= %d ? %[2]s == variables.node : %[2]s.matches('%[3]s'))", validation.LabelValueMaxLength, label, ownership.HashedLabelPattern)
}

// ownVolume is a CEL expression: the PV obj is the requesting node's. Its
// label says so (ownLabel), and its ownership.AnnNodeName annotation, if
// the node's name is short enough to be the label, is absent or the
// node's name, and else is the node's name: without it, any long-named
// node would pass for any other.
func ownVolume(obj string) string {
	name := fmt.Sprintf("%s.metadata.?annotations[?'%s']", obj, ownership.AnnNodeName)
	return fmt.Sprintf("%[1]s && (size(variables.node) <= %[2]d ? %[3]s.orValue(variables.node) : %[3]s.orValue('')) == variables.node",
		ownLabel(obj), validation.LabelValueMaxLength, name)
}

// ownCapacity is a CEL expression: the capacity object obj is the
// requesting node's. Its label says so (ownLabel), and its owner is the
// node's Node (package capacity makes every object so, and the policy
// has required it of every object written since it exists), which names
// the node in full where the label is a hash.
func ownCapacity(obj string) string {
	return ownLabel(obj) + " && " +
		obj + ".metadata.?ownerReferences.orValue([]).exists(r, r.kind == 'Node' && r.name == variables.node)"
}

// refusal is a CEL message expression: the requesting agent, its node,
// and what it may do instead.
func refusal(may string) string {
	return "'node agent ' + request.userInfo.username + ' (node ' + variables.node + ') " + strings.ReplaceAll(may, "'", `\'`) + "'"
}

// AdmissionPolicyBindings apply each of AdmissionPolicies cluster-wide,
// denying what it refuses.
func AdmissionPolicyBindings() []*admissionv1.ValidatingAdmissionPolicyBinding {
	var bindings []*admissionv1.ValidatingAdmissionPolicyBinding
	for _, name := range AdmissionPolicyNames() {
		bindings = append(bindings, denyBinding(name))
	}
	return bindings
}

// denyBinding applies the policy name cluster-wide, denying what it
// refuses. The fields the API server would default are set, so that what
// is read back (Ensure, the manifests' tests) equals this.
func denyBinding(name string) *admissionv1.ValidatingAdmissionPolicyBinding {
	equivalent := admissionv1.Equivalent
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelManagedBy: managedBy}},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       &equivalent,
			},
		},
	}
}

// ensureAdmissionPolicies creates the policies and their bindings if
// missing, and puts a policy's spec back if it differs: like the RBAC
// rules, they are Plinth's own and must match its code.
func ensureAdmissionPolicies(ctx context.Context, client kubernetes.Interface, log logtree.LeveledLogger) error {
	policies := client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	for _, want := range AdmissionPolicies() {
		have, err := getOrCreate(ctx, want, policies.Get, policies.Create, log)
		if err != nil {
			return err
		}
		if have == nil || reflect.DeepEqual(have.Spec, want.Spec) {
			continue
		}
		err = restore(ctx, want.Name, policies.Get, policies.Update, func(cur *admissionv1.ValidatingAdmissionPolicy) { cur.Spec = want.Spec })
		if err != nil {
			return fmt.Errorf("updating ValidatingAdmissionPolicy %s: %w", want.Name, err)
		}
		log.Infof("updated ValidatingAdmissionPolicy %s", want.Name)
	}
	bindings := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for _, want := range AdmissionPolicyBindings() {
		have, err := getOrCreate(ctx, want, bindings.Get, bindings.Create, log)
		if err != nil {
			return err
		}
		if have != nil && !reflect.DeepEqual(have.Spec, want.Spec) {
			log.Warningf("ValidatingAdmissionPolicyBinding %s differs from Plinth's (policy %s, actions %v); leaving it alone",
				want.Name, have.Spec.PolicyName, have.Spec.ValidationActions)
		}
	}
	return nil
}
