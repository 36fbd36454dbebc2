// Package ownership holds the rules that decide which claims and
// PersistentVolumes belong to this node's controllers, and the names derived
// from a claim. The provisioner and the resizer must agree on every one of
// them: a claim the provisioner served but the resizer did not recognise
// would never grow, and one the resizer recognised but the provisioner did
// not would be grown on a node that does not hold it. So they live here,
// once, and both import them.
package ownership

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"source.plinth.dev/pkg/logtree"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/kubernetes/names"
)

// Annotations and labels the controllers read or write. The provisioner and
// selected-node annotations are set by Kubernetes' PV controller and
// scheduler; provisioned-by is how the PV controller knows an external
// deleter owns a PV; the binding annotations are set by whichever of the PV
// controller and the provisioner binds a claim first.
const (
	AnnStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	AnnBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	AnnSelectedNode           = "volume.kubernetes.io/selected-node"
	AnnProvisionedBy          = "pv.kubernetes.io/provisioned-by"
	// AnnBindCompleted and AnnBoundByController are what the PV
	// controller's bind puts on a claim: the scheduler's binding wait ends
	// on the first (with spec.volumeName), and the second says a
	// controller, not the user, chose the volume.
	AnnBindCompleted     = "pv.kubernetes.io/bind-completed"
	AnnBoundByController = "pv.kubernetes.io/bound-by-controller"

	// LabelNode marks the PVs and capacity objects of a node (value:
	// NodeLabelValue) and the claims placed on it (ClaimLabel), so that a
	// node's informers watch only its own objects (a label selector, not
	// a client-side filter: other nodes' objects never reach memory).
	LabelNode = "storage.plinth.dev/node"

	// AnnNodeName is the full name of the node a PV belongs to. LabelNode
	// is a hash for a name longer than a label value (NodeLabelValue),
	// which no admission policy can compute, so the volumes policy reads
	// a long-named node's ownership here (clusterobjects.AdmissionPolicies).
	AnnNodeName = "storage.plinth.dev/node-name"

	// LabelSnapshotManagedBy is the node that must act on a
	// VolumeSnapshotContent (value: the node's name): the
	// snapshot-controller of kubernetes-csi/external-snapshotter, run with
	// --enable-distributed-snapshotting, sets it to the node of the
	// source volume. A node's snapshot controller (package snapshots)
	// watches the contents with its own, and the contents admission
	// policy lets it write no other.
	LabelSnapshotManagedBy = "snapshot.storage.kubernetes.io/managed-by"

	// volumeIDPrefix + the claim UID is the volume handle and the PV name.
	// Deriving both from the UID makes provisioning idempotent: a retried or
	// resumed attempt for one claim always names the same volume and PV, so
	// there can never be two volumes for one claim.
	volumeIDPrefix = "pvc-"
)

// ClaimProvisioner returns the provisioner a claim asks for: the GA
// annotation, or the beta one that older PV controllers still set.
func ClaimProvisioner(pvc *corev1.PersistentVolumeClaim) string {
	if v, ok := pvc.Annotations[AnnStorageProvisioner]; ok {
		return v
	}
	return pvc.Annotations[AnnBetaStorageProvisioner]
}

// OwnsClaim reports whether the claim asks driver for a volume on node
// nodeName. Everything else, including claims for our driver on other
// nodes, is none of this node's business. The annotations stay on a claim
// after it is bound, so the rule holds for its whole life.
func OwnsClaim(pvc *corev1.PersistentVolumeClaim, driver, nodeName string) bool {
	return pvc != nil && ClaimProvisioner(pvc) == driver && pvc.Annotations[AnnSelectedNode] == nodeName
}

// ClaimUnplaced reports whether the claim asks driver for a volume that no
// node has been chosen for yet, and is unbound: one waiting for the
// scheduler, or for the placer if its class binds immediately (package
// placement).
func ClaimUnplaced(pvc *corev1.PersistentVolumeClaim, driver string) bool {
	return pvc != nil && ClaimProvisioner(pvc) == driver && pvc.Annotations[AnnSelectedNode] == "" &&
		pvc.Spec.VolumeName == "" && pvc.DeletionTimestamp == nil
}

// VolumeIDFor is the volume handle and PV name for a claim.
func VolumeIDFor(uid types.UID) string { return volumeIDPrefix + string(uid) }

// ClaimUIDOf parses a volume ID made by VolumeIDFor; ok is false for
// anything else, which the controllers then never treat as their own.
func ClaimUIDOf(id string) (types.UID, bool) {
	uid, found := strings.CutPrefix(id, volumeIDPrefix)
	if !found || !isUID(uid) {
		return "", false
	}
	return types.UID(uid), true
}

// isUID accepts the canonical lower-case 8-4-4-4-12 hex form the apiserver
// gives every object.
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// OwnsVolume reports whether a PV is one this node provisioned: our driver,
// a handle in our format that matches the PV name, our provisioned-by
// annotation, and node affinity to exactly this node's hostname. A PV that
// fails any check (hand-edited, another driver, missing affinity) is left
// alone; the reason is returned for the log.
func OwnsVolume(pv *corev1.PersistentVolume, driver, hostname string) (bool, string) {
	csi := pv.Spec.CSI
	switch {
	case csi == nil || csi.Driver != driver:
		return false, "not a volume of this driver"
	case csi.VolumeHandle != pv.Name:
		return false, fmt.Sprintf("volume handle %q does not match PV name", csi.VolumeHandle)
	case pv.Annotations[AnnProvisionedBy] != driver:
		return false, "not provisioned by this driver"
	}
	if _, ok := ClaimUIDOf(csi.VolumeHandle); !ok {
		return false, fmt.Sprintf("volume handle %q is not in this driver's format", csi.VolumeHandle)
	}
	if got, ok := AffinityHostname(pv); !ok {
		return false, "node affinity is missing or malformed"
	} else if got != hostname {
		return false, fmt.Sprintf("node affinity names host %q, not this node", got)
	}
	return true, ""
}

// AffinityHostname extracts the single hostname the provisioner writes into
// a PV's node affinity.
func AffinityHostname(pv *corev1.PersistentVolume) (string, bool) {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 {
		return "", false
	}
	exprs := na.Required.NodeSelectorTerms[0].MatchExpressions
	if len(exprs) != 1 {
		return "", false
	}
	e := exprs[0]
	if e.Key != names.TopologyKeyHostname || e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
		return "", false
	}
	return e.Values[0], true
}

// NodeLabelValue is the value of LabelNode for a node. Node names may be up
// to 253 characters but label values only 63, so long or otherwise unusable
// names are replaced by a hash (stable across restarts, which is all the
// label selector needs).
func NodeLabelValue(nodeName string) string {
	if len(validation.IsValidLabelValue(nodeName)) == 0 {
		return nodeName
	}
	sum := sha256.Sum256([]byte(nodeName))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}

// NodeNameOfLabel is the node name a LabelNode value stands for, when it
// is the name itself; for a hashed one (see NodeLabelValue) the name
// cannot be known from the label, and ok is false.
func NodeNameOfLabel(v string) (name string, ok bool) {
	if v == "" || hashedLabel.MatchString(v) {
		return "", false
	}
	return v, true
}

// HashedLabelPattern is the form of a hashed LabelNode value (see
// NodeLabelValue), as a regular expression: the admission policies, which
// cannot compute the hash, check this form instead.
const HashedLabelPattern = `^h-[0-9a-f]{40}$`

var hashedLabel = regexp.MustCompile(HashedLabelPattern)

// NodeHostname returns the kubernetes.io/hostname label of node nodeName,
// which is what the node affinity of its PVs names. A node whose kubelet
// has not registered yet has no Node object; its label will be the default
// the kubelet uses, the node name.
func NodeHostname(ctx context.Context, client kubernetes.Interface, nodeName string, log logtree.LeveledLogger) (string, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		log.Warningf("node %s is not registered yet; using its name as hostname label", nodeName)
		return nodeName, nil
	case err != nil:
		return "", fmt.Errorf("looking up node %s: %w", nodeName, err)
	}
	return Hostname(node), nil
}

// Hostname is node's kubernetes.io/hostname label, or its name when the
// label is missing (the kubelet's default).
func Hostname(node *corev1.Node) string {
	if h := node.Labels[names.TopologyKeyHostname]; h != "" {
		return h
	}
	return node.Name
}

// DescribeClaim is how a claim is named in logs and audit lines.
func DescribeClaim(pvc *corev1.PersistentVolumeClaim) string {
	return fmt.Sprintf("%s/%s (uid %s)", pvc.Namespace, pvc.Name, pvc.UID)
}

// A node's claim informer selects, on the API server, only the claims
// whose node label (LabelNode, ClaimLabel) names it. The informer
// transform below is a second wall behind that selector: a claim that
// reaches the node all the same without being its own, as a claim whose
// label is stale would, is kept only as a stub: a PartialObjectMetadata
// with the name and namespace the informer's store needs for its key,
// nothing else (not even in an index). The claims the node keeps lose
// their managedFields, which are often the largest part of an object and
// which the controllers never read. Code reading the claim cache must
// therefore type-check what it finds.

// ClaimTransform returns the informer transform for the PVCs of a node.
func ClaimTransform(driver, nodeName string) cache.TransformFunc {
	return func(obj any) (any, error) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			// Tombstones and anything unexpected pass through untouched.
			return obj, nil
		}
		if OwnsClaim(pvc, driver, nodeName) {
			pvc.ManagedFields = nil
			return pvc, nil
		}
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name:      pvc.Name,
			Namespace: pvc.Namespace,
		}}, nil
	}
}

// StripManagedFields is the transform for objects a controller keeps whole.
func StripManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// UIDIndex indexes our claims by UID, so the provisioner's orphan check
// can tell in O(1) whether the claim a volume was made for still exists.
// Stubs of foreign claims are not indexed (an index entry costs more than
// the stub). A claim that stopped being ours before its volume got a PV
// (the scheduler picked another node) thus makes the volume an orphan,
// which is right: the volume was never bound, so it holds no data, and the
// claim is served elsewhere.
const UIDIndex = "uid"

// IndexByUID is the index function of UIDIndex.
func IndexByUID(obj any) ([]string, error) {
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		return []string{string(pvc.UID)}, nil
	}
	return nil, nil
}
