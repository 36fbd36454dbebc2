package admission

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// admitVolume: a node agent's new PV must name a claim placed on its node
// that asks Plinth's driver for its volume. A claimRef naming no existing
// claim, or a claim of another UID, is let through: the PV controller
// only ever releases such a PV, and a node whose claim was deleted
// meanwhile must not be kept retrying.
func (w *Webhook) admitVolume(ctx context.Context, id clusterobjects.Identity, pv *corev1.PersistentVolume) *admissionv1.AdmissionResponse {
	ref := pv.Spec.ClaimRef
	if ref == nil {
		return allowed()
	}
	claim, err := w.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return allowed()
	case err != nil:
		return w.unavailable(fmt.Sprintf("the claim %s/%s that PV %s of %s names", ref.Namespace, ref.Name, pv.Name, id.User), err)
	case ref.UID != "" && ref.UID != claim.UID:
		return allowed()
	}
	if why := claimRefusal(id.Node, claim); why != "" {
		return w.forbidden(fmt.Sprintf("node agent %s (node %s) may create a PV only for a claim that asks %s for its volume and is placed on its node: claim %s %s",
			id.User, id.Node, names.DriverName, ownership.DescribeClaim(claim), why))
	}
	return allowed()
}

// claimRefusal says why node may not make a PV for claim, or "" if it
// may: the claim asks Plinth's driver for its volume (its
// storage-provisioner annotation) and the scheduler, or the admission
// server's placer, chose node for it (its selected-node annotation).
func claimRefusal(node string, claim *corev1.PersistentVolumeClaim) string {
	selected := claim.Annotations[ownership.AnnSelectedNode]
	switch provisioner := ownership.ClaimProvisioner(claim); {
	case node == "":
		return "cannot be checked: the request names no node"
	case provisioner != names.DriverName:
		return fmt.Sprintf("asks %q for its volume", provisioner)
	case selected == "":
		return "is not placed on any node"
	case selected != node:
		return fmt.Sprintf("is placed on node %s", selected)
	}
	return ""
}

// Probe is a PV that the admission policies let node create and that
// names claim: the webhook's answer to it says whether the webhook is in
// force (a control plane's readiness check creates it as a dry run).
func Probe(node string, claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	name := ownership.VolumeIDFor(claim.UID)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
			Annotations: map[string]string{ownership.AnnNodeName: node},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(1<<20, resource.BinarySI)},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: name}},
		},
	}
}
