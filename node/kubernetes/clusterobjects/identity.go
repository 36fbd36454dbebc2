package clusterobjects

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Identity is who the API server takes a node agent for, and what the
// admission policies make of it.
type Identity struct {
	// User is the user name the API server authenticated.
	User string
	// Node is the node the admission policies hold the agent to, as they
	// read it (AdmissionPolicies' variable "node"): "" when they read
	// none, and then they refuse every write of the agent's.
	Node string
	// Restricted is whether the policies apply to the agent at all (their
	// match condition: the node agents' group, or the DaemonSet's service
	// account).
	Restricted bool
}

// WhoAmI asks the API server who the client is (a SelfSubjectReview,
// which every authenticated user may make) and reads it as the admission
// policies do.
func WhoAmI(ctx context.Context, c kubernetes.Interface) (Identity, error) {
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("asking the API server who this node agent is (SelfSubjectReview): %w", err)
	}
	return IdentityOf(r.Status.UserInfo), nil
}

// IdentityOf reads an authenticated user as the admission policies do
// (their match condition and their variable "node"); the admission
// webhook reads the requests it admits with it.
func IdentityOf(u authenticationv1.UserInfo) Identity {
	id := Identity{User: u.Username}
	for _, g := range u.Groups {
		id.Restricted = id.Restricted || g == NodeAgentGroup
	}
	id.Restricted = id.Restricted || u.Username == DaemonSetUser()
	if node, ok := strings.CutPrefix(u.Username, NodeAgentUserPrefix); ok {
		id.Node = node
	} else {
		id.Node = strings.Join(u.Extra[nodeNameExtra], "")
	}
	return id
}

// CheckDaemonSetIdentity refuses to run plinth-node of a DaemonSet (in the
// cluster, with its pod's service account) as anything but the service
// account the admission policies hold to the pod's node, on node. Every
// other identity gets RBAC's cluster-wide rights unrestricted: deploy/
// moved to another namespace (a kustomize overlay's namespace:) or run as
// another service account would let every node write every other node's
// claims, volumes and capacity, with nothing to show for it.
func CheckDaemonSetIdentity(id Identity, node string) error {
	switch {
	case id.User != DaemonSetUser():
		return fmt.Errorf("plinth-node runs as %s, which the admission policies %s do not restrict: "+
			"deploy it in namespace %s with service account %s (deploy/ as it is; a kustomize overlay must not change its namespace)",
			id.User, strings.Join(AdmissionPolicyNames(), ", "), DaemonSetNamespace, DaemonSetServiceAccount)
	case id.Node == "":
		return fmt.Errorf("the API server does not say which node %s runs on (no %s in its user info; Kubernetes 1.32 or later adds it to pod-bound service account tokens), "+
			"so the admission policies would refuse every write of this node agent", id.User, nodeNameExtra)
	case id.Node != node:
		return fmt.Errorf("plinth-node serves node %s but its service account token is bound to a pod on node %s; the admission policies would hold it to %s",
			node, id.Node, id.Node)
	}
	return nil
}
