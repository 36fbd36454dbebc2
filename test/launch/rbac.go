package launch

import (
	"context"
	"fmt"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/clusterobjects"
)

// plinthNodeGroup is the group (O=) of plinth-node's client certificate:
// the group the node agent's ClusterRoleBinding names.
const plinthNodeGroup = clusterobjects.NodeAgentGroup

// applyRBAC creates plinth-node's ClusterRole and binding, exactly as the
// node packages define them, so plinth-node runs with the restricted
// identity a real node has. (It does not run as system:node:<name>:
// NodeRestriction would rightly stop a kubelet identity from creating
// PersistentVolumes.) Objects that exist already are left alone.
func (c *Cluster) applyRBAC(ctx context.Context) error {
	role := clusterobjects.ClusterRole()
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	binding := clusterobjects.ClusterRoleBinding()
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

// applyStorageObjects creates the CSIDriver and the default StorageClass.
// plinth-node ensures them at start too, but with its restricted identity
// it may only read them; like an installer, the launcher creates them with
// admin rights.
func (c *Cluster) applyStorageObjects(ctx context.Context) error {
	driver := clusterobjects.CSIDriver()
	if _, err := c.Client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CSIDriver %s: %w", driver.Name, err)
	}
	class := clusterobjects.StorageClass()
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", class.Name, err)
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
	if p.PlinthNodeMetrics != "" {
		args = append(args, "--metrics-address="+p.PlinthNodeMetrics)
	}
	if !p.QuotaEnforced {
		args = append(args, "--allow-unenforced-capacity")
	}
	return args
}
