package clusterobjects

import (
	"fmt"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server's priority and fairness (APF) classifies every request
// by FlowSchema into a priority level with seats of its own. Left to the
// defaults, the admission server's requests share a level with the node
// agents' (global-default for a certificate identity, workload-low for a
// service account), and that deadlocks a busy fleet: each node's PV
// creation holds a seat while it waits for the webhook, and the webhook's
// live read of the claim (package admission) waits for a seat in the
// same level. Measured with 100 and 200 node agents provisioning at once
// (bench/fleet, 2026-11-28): 24 and 6 of 10,000 claims Bound after 5.5
// and 13 minutes, the reads timing out in the queue. These FlowSchemas
// lift the admission server above the nodes.
const (
	// AdmissionFlowSchemaName names the FlowSchema of the admission
	// server's requests (AdmissionFlowSchemas).
	AdmissionFlowSchemaName = "plinth-admission"
	// PlacerElectionFlowSchemaName names the FlowSchema of the placer's
	// leader election.
	PlacerElectionFlowSchemaName = "plinth-placer-leader-election"

	// admissionPriorityLevel is the built-in level of kube-controller-
	// manager and kube-scheduler: the admission server is on the path of
	// the control plane's own writes of volumes, as they are.
	admissionPriorityLevel = "workload-high"
	// electionPriorityLevel is the built-in level of leader elections,
	// so that a placer under load keeps its Lease.
	electionPriorityLevel = "leader-election"
	// The precedences place these schemas after the built-in ones of the
	// same levels (200 and 800) and before every schema of service
	// accounts (900 and 9000) and the catch-all global-default (9900),
	// which would otherwise take the same requests.
	electionPrecedence  = 250
	admissionPrecedence = 850
)

// AdmissionFlowSchemas put the requests of subject, the admission
// server's identity, in a priority level above the node agents': its
// Lease requests in namespace (the placer's, AdmissionLeaseRole) with
// the cluster's leader elections, and the rest with the control plane's
// controllers. Flows are told apart by user, as in the built-in schemas
// of the control plane's components. The subject is a user, a group or a
// service account.
func AdmissionFlowSchemas(namespace string, subject rbacv1.Subject) ([]*flowcontrolv1.FlowSchema, error) {
	s, err := flowSubject(subject)
	if err != nil {
		return nil, fmt.Errorf("the admission server's FlowSchemas: %w", err)
	}
	who := []flowcontrolv1.Subject{s}
	return []*flowcontrolv1.FlowSchema{
		flowSchema(PlacerElectionFlowSchemaName, electionPriorityLevel, electionPrecedence, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: who,
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
				Verbs:      []string{"get", "create", "update"},
				APIGroups:  []string{"coordination.k8s.io"},
				Resources:  []string{"leases"},
				Namespaces: []string{namespace},
			}},
		}),
		flowSchema(AdmissionFlowSchemaName, admissionPriorityLevel, admissionPrecedence, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: who,
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
				Verbs:        []string{flowcontrolv1.VerbAll},
				APIGroups:    []string{flowcontrolv1.APIGroupAll},
				Resources:    []string{flowcontrolv1.ResourceAll},
				ClusterScope: true,
				Namespaces:   []string{flowcontrolv1.NamespaceEvery},
			}},
		}),
	}, nil
}

// flowSchema is a FlowSchema of one rule, a flow per user.
func flowSchema(name, level string, precedence int32, rule flowcontrolv1.PolicyRulesWithSubjects) *flowcontrolv1.FlowSchema {
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelManagedBy: managedBy}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
			MatchingPrecedence:         precedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rule},
		},
	}
}

// flowSubject is the APF form of an RBAC subject: a user, a group or a
// service account.
func flowSubject(s rbacv1.Subject) (flowcontrolv1.Subject, error) {
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		return flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindServiceAccount,
			ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: s.Namespace, Name: s.Name}}, nil
	case rbacv1.GroupKind:
		return flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: s.Name}}, nil
	case rbacv1.UserKind:
		return flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: s.Name}}, nil
	}
	return flowcontrolv1.Subject{}, fmt.Errorf("a subject of kind %q: want %s, %s or %s", s.Kind, rbacv1.UserKind, rbacv1.GroupKind, rbacv1.ServiceAccountKind)
}
