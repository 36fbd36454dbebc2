package clusterobjects

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
)

// RBAC can let the admission server update its two webhook
// configurations, by name, but not limit the update to the caBundle it
// keeps (package admission's SecretKeeper): with the server's identity
// one could make the webhook fail open, send node agents' writes
// elsewhere, or stop it seeing them. These policies refuse the server's
// identities any other change. ValidatingAdmissionPolicies do apply to
// webhook configurations (the API server exempts only the policies and
// their bindings from them, and webhook configurations from webhooks):
// TestAdmissionServerChangesOnlyCABundle proves it against a real one.
const (
	// WebhookConfigPolicyName names the policy over the
	// ValidatingWebhookConfiguration WebhookName, and its binding.
	WebhookConfigPolicyName = "plinth-admission-node-writes"
	// ClaimLabelsConfigPolicyName names the policy over the
	// MutatingWebhookConfiguration ClaimLabelsWebhookName, and its
	// binding.
	ClaimLabelsConfigPolicyName = "plinth-admission-claim-labels"

	// AdmissionNamespace and AdmissionServiceAccount are where deploy/
	// runs the admission server, and as whom.
	AdmissionNamespace      = "plinth-system"
	AdmissionServiceAccount = "plinth-admission"
)

// AdmissionServiceAccountUser is the user name of deploy/'s admission
// server.
func AdmissionServiceAccountUser() string {
	return "system:serviceaccount:" + AdmissionNamespace + ":" + AdmissionServiceAccount
}

// webhookFields are the fields of a ValidatingWebhook, by their JSON
// names, that the policies keep as they were; with "clientConfig.caBundle"
// they are every field (TestWebhookPoliciesCoverEveryField checks it
// against k8s.io/api, so that a field the API gains is not left out).
var webhookFields = []string{
	"name", "clientConfig.url", "clientConfig.service", "rules", "failurePolicy", "matchPolicy",
	"namespaceSelector", "objectSelector", "sideEffects", "timeoutSeconds", "admissionReviewVersions", "matchConditions",
}

// mutatingWebhookFields are a MutatingWebhook's: a ValidatingWebhook's
// and its reinvocationPolicy.
var mutatingWebhookFields = append(append([]string{}, webhookFields...), "reinvocationPolicy")

// WebhookConfigPolicies hold the admission server's identities
// (AdmissionUser, where the control plane runs it, and
// AdmissionServiceAccountUser, where deploy/ does) to changing nothing of
// the two webhook configurations but each webhook's caBundle.
func WebhookConfigPolicies() []*admissionv1.ValidatingAdmissionPolicy {
	return []*admissionv1.ValidatingAdmissionPolicy{
		webhookConfigPolicy(WebhookConfigPolicyName, "validatingwebhookconfigurations", WebhookName, webhookFields),
		webhookConfigPolicy(ClaimLabelsConfigPolicyName, "mutatingwebhookconfigurations", ClaimLabelsWebhookName, mutatingWebhookFields),
	}
}

// webhookConfigPolicy is one of WebhookConfigPolicies: over the
// configuration name of resource, whose webhooks have fields.
func webhookConfigPolicy(policyName, resource, name string, fields []string) *admissionv1.ValidatingAdmissionPolicy {
	all := admissionv1.AllScopes
	var same []string
	for _, f := range fields {
		// Optional on both sides: a field left out stays left out.
		path := strings.ReplaceAll(f, ".", ".?")
		if !strings.Contains(f, ".") {
			path = "?" + f
		}
		same = append(same, fmt.Sprintf("w.%[1]s == o.%[1]s", path))
	}
	metadata := []string{}
	for _, f := range []string{"labels", "annotations", "ownerReferences", "finalizers"} {
		metadata = append(metadata, fmt.Sprintf("object.metadata.?%[1]s == oldObject.metadata.?%[1]s", f))
	}
	rule := admissionv1.NamedRuleWithOperations{
		ResourceNames: []string{name},
		RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Update},
			Rule: admissionv1.Rule{APIGroups: []string{admissionv1.GroupName}, APIVersions: []string{"v1"},
				Resources: []string{resource}, Scope: &all},
		},
	}
	server := admissionv1.MatchCondition{
		Name: "admission-server",
		Expression: fmt.Sprintf("request.userInfo.username == '%s' || request.userInfo.username == '%s'",
			AdmissionUser, AdmissionServiceAccountUser()),
	}
	return denyPolicy(policyName, rule, server, nil, []admissionv1.Validation{{
		Expression: strings.Join(metadata, " && ") + " && size(object.?webhooks.orValue([])) == size(oldObject.?webhooks.orValue([])) && " +
			"object.?webhooks.orValue([]).all(w, oldObject.?webhooks.orValue([]).exists(o, " + strings.Join(same, " && ") + "))",
		MessageExpression: "'the admission server ' + request.userInfo.username + ' may change only the caBundle of " + name + "'",
	}})
}

// WebhookConfigPolicyBindings apply each of WebhookConfigPolicies,
// denying what it refuses.
func WebhookConfigPolicyBindings() []*admissionv1.ValidatingAdmissionPolicyBinding {
	var bindings []*admissionv1.ValidatingAdmissionPolicyBinding
	for _, p := range WebhookConfigPolicies() {
		bindings = append(bindings, denyBinding(p.Name))
	}
	return bindings
}
