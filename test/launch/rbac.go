package launch

import (
	"context"
	"fmt"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// plinthNodeGroup is the group of plinth-node's client certificate.
	plinthNodeGroup = "plinth:nodes"
	// PlinthNodeRole is the ClusterRole plinth-node runs with.
	PlinthNodeRole = "plinth:node"
)

// plinthNodeRules are what a node-local provisioner, resizer and CSI node
// plugin need. plinth-node does not run as system:node: NodeRestriction
// would (rightly) stop a kubelet identity from creating PersistentVolumes.
// When the node packages grow an RBAC manifest of their own, this should be
// read from there instead.
var plinthNodeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"update", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes", "csidrivers", "volumeattachments"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
}

// applyRBAC creates the ClusterRole and binding of plinth-node.
func (c *Cluster) applyRBAC(ctx context.Context) error {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: PlinthNodeRole}, Rules: plinthNodeRules}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", PlinthNodeRole, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: PlinthNodeRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: PlinthNodeRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: plinthNodeGroup}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", PlinthNodeRole, err)
	}
	return nil
}

// PlinthNodeArgs are the plinth-node flags that fit this cluster: the node
// tree under <Dir>/node, with the XFS data filesystem as its data directory
// and the kubelet's root directory as its kubelet directory. On a host whose
// kernel cannot enforce XFS project quotas it adds
// --allow-unenforced-capacity, so filesystem volumes still work there (with
// plinth-node's loud warnings) instead of being refused.
func PlinthNodeArgs(p Paths) []string {
	args := []string{
		"--root=" + filepath.Join(p.Dir, "node"),
		"--data-dir=" + p.DataDir,
		"--kubelet-dir=" + p.KubeletRootDir,
		"--node-name=" + p.NodeName,
		"--kubeconfig=" + p.NodeKubeconfig,
	}
	if !p.QuotaEnforced {
		args = append(args, "--allow-unenforced-capacity")
	}
	return args
}
