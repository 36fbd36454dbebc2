package clusterobjects

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// The admission webhook (package admission) checks the rules of a node
// agent's writes that AdmissionPolicies cannot, because a policy sees only
// the object it admits: a new PV's claimRef names a claim, and a new
// capacity object names a host and a StorageClass.
const (
	// WebhookName names the ValidatingWebhookConfiguration.
	WebhookName = "plinth-node-writes"
	// WebhookCheckName names the configuration's one webhook, as the API
	// server's refusals quote it.
	WebhookCheckName = "node-writes.storage.plinth.dev"
	// WebhookPath is the path the server serves the webhook on.
	WebhookPath = "/validate"
	// AdmissionRoleName names the ClusterRole of the webhook's server.
	AdmissionRoleName = "plinth:admission"
	// AdmissionLeaseRoleName names the Role, and its binding, of the
	// placer's leader election (AdmissionLeaseRole): not
	// AdmissionRoleName, which the Secret's Role of the same namespace
	// has.
	AdmissionLeaseRoleName = "plinth:admission:lease"
	// PlacerLeaseName names the Lease by which the admission server's
	// replicas elect the one whose placer places claims.
	PlacerLeaseName = "plinth-placer"
	// AdmissionUser is the user name of the webhook server's client
	// certificate where the control plane runs it (test/launch).
	AdmissionUser = "system:plinth-admission"

	// ClaimLabelsWebhookName names the MutatingWebhookConfiguration of
	// the server's claim labels (ClaimLabelsWebhook).
	ClaimLabelsWebhookName = "plinth-claim-labels"
	// ClaimLabelsCheckName names its one webhook, as the API server's
	// refusals quote it.
	ClaimLabelsCheckName = "claim-labels.storage.plinth.dev"
	// ClaimLabelsPath is the path the server labels claims on.
	ClaimLabelsPath = "/label-claims"
)

// NodeWritesWebhook registers the webhook served at client: it sees the
// PVs and CSIStorageCapacity objects node agents create (the policies'
// match condition), and nothing else, so the cluster's other writes, and
// a node's writes of its claims, never wait for it. Creations only: a
// PV's claimRef may not change (the volumes policy), a capacity object's
// host and class cannot. A node agent's claim writes need no webhook: the
// claims policy refuses every placement a node tries (AdmissionPolicies).
//
// failurePolicy Fail: an object the webhook could not check is refused,
// and the node retries it, as it retries any failed write. Only node
// agents' creations wait for the server while it is down; bound claims
// and their pods are untouched.
func NodeWritesWebhook(client admissionv1.WebhookClientConfig) *admissionv1.ValidatingWebhookConfiguration {
	// The fields the API server would default are set, so that what is
	// read back equals this.
	d := webhookDefaults()
	return &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookName, Labels: map[string]string{labelManagedBy: managedBy}},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:         WebhookCheckName,
			ClientConfig: client,
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"persistentvolumes"}, Scope: &d.scope},
			}, {
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{"storage.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"csistoragecapacities"}, Scope: &d.scope},
			}},
			FailurePolicy:           &d.fail,
			MatchPolicy:             &d.equivalent,
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             &d.none,
			TimeoutSeconds:          &d.timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         []admissionv1.MatchCondition{nodeAgents()},
		}},
	}
}

// ClaimLabelsWebhook registers the server's mutating path at client: it
// sees every creation and update of a claim that asks Plinth's driver for
// its volume or carries the node label (its match condition), and keeps
// the label ownership.LabelNode what the claim's annotations say (package
// admission's Labels). Other claims never wait for it.
//
// failurePolicy Fail: a claim of Plinth's is never written without its
// label, since a claim without one would reach no node and wait with no
// word why. While the server is down, the writes of such claims fail
// (the PV controller's says so in a ProvisioningFailed Event on the
// claim) and are retried by their writers; nothing else waits.
// reinvocationPolicy IfNeeded: a later mutating webhook that changes the
// annotations has the label put right again.
func ClaimLabelsWebhook(client admissionv1.WebhookClientConfig) *admissionv1.MutatingWebhookConfiguration {
	// The fields the API server would default are set, so that what is
	// read back equals this.
	d := webhookDefaults()
	ifNeeded := admissionv1.IfNeededReinvocationPolicy
	label := fmt.Sprintf("object.metadata.?labels[?'%s'].hasValue()", ownership.LabelNode)
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimLabelsWebhookName, Labels: map[string]string{labelManagedBy: managedBy}},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:         ClaimLabelsCheckName,
			ClientConfig: client,
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"persistentvolumeclaims"}, Scope: &d.scope},
			}},
			FailurePolicy:           &d.fail,
			MatchPolicy:             &d.equivalent,
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             &d.none,
			TimeoutSeconds:          &d.timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &ifNeeded,
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "plinth-claims",
				Expression: fmt.Sprintf("%s == '%s' || %s", claimProvisioner("object"), names.DriverName, label),
			}},
		}},
	}
}

// webhookSettings are the settings both of the server's registrations
// share, as the API server would default them.
type webhookSettings struct {
	fail       admissionv1.FailurePolicyType
	equivalent admissionv1.MatchPolicyType
	none       admissionv1.SideEffectClass
	scope      admissionv1.ScopeType
	timeout    int32
}

// webhookDefaults is webhookSettings with the values both use.
func webhookDefaults() webhookSettings {
	return webhookSettings{fail: admissionv1.Fail, equivalent: admissionv1.Equivalent,
		none: admissionv1.SideEffectClassNone, scope: admissionv1.AllScopes, timeout: 5}
}

// AdmissionRole is what the admission server does in the cluster: read
// the claim a new PV names, and the Node and StorageClass a new capacity
// object names, live (never from a cache, which could be behind the
// placement the node relies on); list and patch claims, to label those
// written before its claim labels were registered, and PVs, to give those
// of long-named nodes written before the annotation their node's name
// (package admission's KeepBackfilled); place the claims of Immediate classes (package
// placement, whose placer the server runs: no node agent places a
// claim), for which it watches claims, Nodes, StorageClasses and the
// capacity the nodes publish, patches a claim's selected-node
// annotation, reads live the source of a claim with a data source (a
// VolumeSnapshot and its content, or a claim and its PV) to place the
// claim on the source's node, and says what it did, or why it could not, in Events
// (created, and patched when they repeat); and, where it keeps its own
// certificate (deploy/), put its CAs into the caBundle of its two
// configurations (package admission's SetCABundle), which it may read and
// update alone: RBAC cannot narrow the update to the caBundle, which
// WebhookConfigPolicies do. The placer's leader election is
// AdmissionLeaseRole's.
func AdmissionRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionRoleName, Labels: map[string]string{labelManagedBy: managedBy}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots", "volumesnapshotcontents"}, Verbs: []string{"get"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"},
				ResourceNames: []string{WebhookName}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
				ResourceNames: []string{ClaimLabelsWebhookName}, Verbs: []string{"get", "update"}},
		},
	}
}

// AdmissionSecretRole lets the webhook's server keep its certificate in
// the Secret name of its namespace (package admission's
// SecretCertificate): create it (which RBAC cannot limit to a name),
// read and replace that one.
func AdmissionSecretRole(namespace, name string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionRoleName, Namespace: namespace, Labels: map[string]string{labelManagedBy: managedBy}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{name}, Verbs: []string{"get", "update"}},
		},
	}
}

// AdmissionLeaseRole lets the admission server's replicas elect the one
// whose placer places claims (package placement), by the Lease
// PlacerLeaseName of namespace: create it (which RBAC cannot limit to a
// name), read and renew that one. One placer at a time chooses a node
// for a claim; the others wait to take over.
func AdmissionLeaseRole(namespace string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionLeaseRoleName, Namespace: namespace, Labels: map[string]string{labelManagedBy: managedBy}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{PlacerLeaseName}, Verbs: []string{"get", "update"}},
		},
	}
}

// AdmissionLeaseRoleBinding grants AdmissionLeaseRole of namespace to
// subject.
func AdmissionLeaseRoleBinding(namespace string, subject rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionLeaseRoleName, Namespace: namespace, Labels: map[string]string{labelManagedBy: managedBy}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AdmissionLeaseRoleName},
		Subjects:   []rbacv1.Subject{subject},
	}
}

// AdmissionRoleBinding grants AdmissionRole to subject.
func AdmissionRoleBinding(subject rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionRoleName, Labels: map[string]string{labelManagedBy: managedBy}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AdmissionRoleName},
		Subjects:   []rbacv1.Subject{subject},
	}
}
