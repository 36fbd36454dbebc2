package admission

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// admitCapacity: a node agent's new capacity object must be for its own
// host (its Node's hostname label, as package capacity publishes it) and
// for a StorageClass of Plinth's driver. Both are immutable, so creations
// are all there is to check.
func (w *Webhook) admitCapacity(ctx context.Context, id clusterobjects.Identity, c *storagev1.CSIStorageCapacity) *admissionv1.AdmissionResponse {
	name := c.Name
	if name == "" {
		name = c.GenerateName + "*"
	}
	what := fmt.Sprintf("CSIStorageCapacity %s/%s of %s", c.Namespace, name, id.User)
	var node *corev1.Node
	if id.Node != "" {
		var err error
		node, err = w.client.CoreV1().Nodes().Get(ctx, id.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			node = nil
		case err != nil:
			return w.unavailable(fmt.Sprintf("the Node %s for %s", id.Node, what), err)
		}
	}
	class, err := w.client.StorageV1().StorageClasses().Get(ctx, c.StorageClassName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		class = nil
	case err != nil:
		return w.unavailable(fmt.Sprintf("the StorageClass %q of %s", c.StorageClassName, what), err)
	}
	if why := capacityRefusal(id.Node, node, class, c); why != "" {
		return w.forbidden(fmt.Sprintf("node agent %s (node %s) may publish capacity only for its own host and a StorageClass of %s: %s",
			id.User, id.Node, names.DriverName, why))
	}
	return allowed()
}

// capacityRefusal says why the agent of nodeName (whose Node is node, nil
// if there is none) may not publish c for class (nil if there is none),
// or "" if it may.
func capacityRefusal(nodeName string, node *corev1.Node, class *storagev1.StorageClass, c *storagev1.CSIStorageCapacity) string {
	var host string
	if c.NodeTopology != nil && len(c.NodeTopology.MatchExpressions) == 0 && len(c.NodeTopology.MatchLabels) == 1 {
		host = c.NodeTopology.MatchLabels[names.TopologyKeyHostname]
	}
	switch {
	case nodeName == "":
		return "the request names no node"
	case node == nil:
		return fmt.Sprintf("node %s has no Node object", nodeName)
	case host == "":
		return fmt.Sprintf("the capacity is not for one host (%s), but for %v", names.TopologyKeyHostname, c.NodeTopology)
	case host != ownership.Hostname(node):
		return fmt.Sprintf("the capacity is for host %q, the node's %s is %q", host, names.TopologyKeyHostname, ownership.Hostname(node))
	case class == nil:
		return fmt.Sprintf("StorageClass %q does not exist", c.StorageClassName)
	case class.Provisioner != names.DriverName:
		return fmt.Sprintf("StorageClass %q belongs to %q", class.Name, class.Provisioner)
	}
	return ""
}
