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

// admitPlacement: a node agent that places an unplaced claim on itself
// (adds the selected-node annotation naming itself: the provisioner's
// placement) may do so only where the provisioner itself would, for a
// claim no scheduler places: its StorageClass is Plinth's, binds
// immediately (ownership.BindsImmediately) and its allowedTopologies
// admit the node's labels (ownership.TopologyAdmits). The claims policy
// lets a node place any unplaced, unbound claim of Plinth's on itself,
// and nothing else: it cannot read the class. Without this check, a
// compromised node could take a claim of a WaitForFirstConsumer class
// that its node handed back, or one whose topology excludes it, and the
// PV it then makes for it (which volume.go allows, the claim being placed
// on it) would draw the claim's pods, with their secrets, to it.
//
// The class is read live, and the Node only when the class has
// allowedTopologies: a Node that does not exist has no labels, which a
// class without topology admits (as the node's own provisioner would not
// place the claim then, nothing is lost) and one with topology does not.
// A request that is not a placement by the node of itself is let
// through: the webhook's match condition sends no other, and the claims
// policy judges the rest.
func (w *Webhook) admitPlacement(ctx context.Context, id clusterobjects.Identity, old, claim *corev1.PersistentVolumeClaim) *admissionv1.AdmissionResponse {
	if old.Annotations[ownership.AnnSelectedNode] != "" || claim.Annotations[ownership.AnnSelectedNode] == "" {
		return allowed()
	}
	refuse := func(why string) *admissionv1.AdmissionResponse {
		return w.forbidden(fmt.Sprintf("node agent %s (node %s) may place a claim on itself only if the claim's StorageClass is %s's, "+
			"binds immediately and admits the node by its allowedTopologies, as the node's provisioner places claims: claim %s %s",
			id.User, id.Node, names.DriverName, ownership.DescribeClaim(claim), why))
	}
	var name string
	if claim.Spec.StorageClassName != nil {
		name = *claim.Spec.StorageClassName
	}
	if name == "" {
		return refuse("names no StorageClass")
	}
	class, err := w.client.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return refuse(fmt.Sprintf("is of StorageClass %q, which does not exist", name))
	case err != nil:
		return w.unavailable(fmt.Sprintf("the StorageClass %q of claim %s that %s places on itself", name, ownership.DescribeClaim(claim), id.User), err)
	}
	var node *corev1.Node
	if id.Node != "" && len(class.AllowedTopologies) > 0 {
		node, err = w.client.CoreV1().Nodes().Get(ctx, id.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			node = nil
		case err != nil:
			return w.unavailable(fmt.Sprintf("the Node %s whose agent places claim %s on it", id.Node, ownership.DescribeClaim(claim)), err)
		}
	}
	if why := placementRefusal(id.Node, node, class, claim); why != "" {
		return refuse(why)
	}
	return allowed()
}

// placementRefusal says why the agent of nodeName (whose Node is node, nil
// if there is none or it was not read) may not place claim, of class, on
// itself, or "" if it may.
func placementRefusal(nodeName string, node *corev1.Node, class *storagev1.StorageClass, claim *corev1.PersistentVolumeClaim) string {
	var labels map[string]string
	if node != nil {
		labels = node.Labels
	}
	switch selected := claim.Annotations[ownership.AnnSelectedNode]; {
	case nodeName == "":
		return "cannot be checked: the request names no node"
	case selected != nodeName:
		return fmt.Sprintf("would be placed on node %s", selected)
	case class.Provisioner != names.DriverName:
		return fmt.Sprintf("is of StorageClass %q, which belongs to %q", class.Name, class.Provisioner)
	case !ownership.BindsImmediately(class):
		return fmt.Sprintf("is of StorageClass %q, which binds when its first consumer is scheduled (volumeBindingMode %s): the scheduler places its claims",
			class.Name, *class.VolumeBindingMode)
	case !ownership.TopologyAdmits(class.AllowedTopologies, labels):
		if node == nil {
			return fmt.Sprintf("is of StorageClass %q, whose allowedTopologies admit no node without a Node object", class.Name)
		}
		return fmt.Sprintf("is of StorageClass %q, whose allowedTopologies do not admit the node's labels", class.Name)
	}
	return ""
}
