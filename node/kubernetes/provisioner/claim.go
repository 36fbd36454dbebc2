package provisioner

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
)

// Annotations and labels the controller reads or writes. The provisioner and
// selected-node annotations are set by Kubernetes' PV controller and scheduler;
// provisioned-by is how the PV controller knows an external deleter owns a PV.
const (
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annSelectedNode           = "volume.kubernetes.io/selected-node"
	annProvisionedBy          = "pv.kubernetes.io/provisioned-by"

	// labelNode marks the PVs this node provisioned (value: nodeLabelValue),
	// so the PV informer can watch only this node's PVs (a label
	// selector, not a client-side filter: foreign PVs never reach memory).
	labelNode = "storage.plinth.dev/node"

	// volumeIDPrefix + the claim UID is the volume handle and the PV name.
	// Deriving both from the UID makes provisioning idempotent: a retried or
	// resumed attempt for one claim always names the same volume and PV, so
	// there can never be two volumes for one claim.
	volumeIDPrefix = "pvc-"
)

// errInvalidClaim marks a request that cannot succeed until a user changes
// the claim or its StorageClass; it is reported, not retried with backoff.
var errInvalidClaim = errors.New("invalid claim")

// claimProvisioner returns the provisioner a claim asks for: the GA
// annotation, or the beta one that older PV controllers still set.
func claimProvisioner(pvc *corev1.PersistentVolumeClaim) string {
	if v, ok := pvc.Annotations[annStorageProvisioner]; ok {
		return v
	}
	return pvc.Annotations[annBetaStorageProvisioner]
}

// ownsClaim reports whether the claim asks our driver for a volume on this
// node. Everything else, including claims for our driver on other nodes, is
// none of this controller's business.
func ownsClaim(pvc *corev1.PersistentVolumeClaim, driver, nodeName string) bool {
	return pvc != nil && claimProvisioner(pvc) == driver && pvc.Annotations[annSelectedNode] == nodeName
}

// volumeIDFor is the volume handle and PV name for a claim.
func volumeIDFor(uid types.UID) string { return volumeIDPrefix + string(uid) }

// claimUIDOf parses a volume ID made by volumeIDFor; ok is false for anything
// else, which the controller then never treats as its own.
func claimUIDOf(id string) (types.UID, bool) {
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

// request is a validated provisioning request.
type request struct {
	id      string
	mode    corev1.PersistentVolumeMode
	bytes   int64
	size    resource.Quantity
	reclaim corev1.PersistentVolumeReclaimPolicy
	class   *storagev1.StorageClass
}

// supportedParameters lists the StorageClass parameters the driver
// understands (none so far). Unknown ones are refused rather than ignored: a
// user who asks for, say, a filesystem type must not get a volume that
// silently lacks it.
var supportedParameters = map[string]bool{}

// maxBytes is the largest size a volume can have. It is well below 2^63-1,
// which matters: resource.Quantity silently clamps larger values (100Ei,
// say) to exactly 2^63-1, so that request may really have been anything.
var maxBytes = resource.NewQuantity(volume.MaxBytes, resource.BinarySI)

// validateClaim checks everything about a claim and its class before anything
// is created, so bad input leaves nothing behind. Errors wrap errInvalidClaim
// and are phrased for the user who reads them in an Event.
func validateClaim(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, driver string) (*request, error) {
	bad := func(format string, args ...any) (*request, error) {
		return nil, fmt.Errorf("%w: %s", errInvalidClaim, fmt.Sprintf(format, args...))
	}
	if class.Provisioner != driver {
		return bad("StorageClass %q belongs to provisioner %q, not %q", class.Name, class.Provisioner, driver)
	}
	var unknown []string
	for k := range class.Parameters {
		if !supportedParameters[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return bad("StorageClass %q has unknown parameters %s; %s supports none", class.Name, strings.Join(unknown, ", "), driver)
	}
	if pvc.Spec.Selector != nil {
		return bad("claims with a selector are not supported (a selector picks existing volumes; this driver only provisions new ones)")
	}
	if pvc.Spec.DataSource != nil || pvc.Spec.DataSourceRef != nil {
		return bad("volume data sources (clones, snapshots, populators) are not supported")
	}
	if len(pvc.Spec.AccessModes) == 0 {
		return bad("no access mode requested; use ReadWriteOnce or ReadWriteOncePod")
	}
	for _, m := range pvc.Spec.AccessModes {
		if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			return bad("access mode %q is not supported: volumes are local to one node; use ReadWriteOnce or ReadWriteOncePod", m)
		}
	}
	mode := corev1.PersistentVolumeFilesystem
	if pvc.Spec.VolumeMode != nil {
		mode = *pvc.Spec.VolumeMode
	}
	if mode != corev1.PersistentVolumeFilesystem && mode != corev1.PersistentVolumeBlock {
		return bad("unknown volume mode %q; use Filesystem or Block", mode)
	}
	q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return bad("no storage request")
	}
	if q.Cmp(*maxBytes) > 0 {
		return bad("requested size %s is over the maximum of %s", q.String(), maxBytes.String())
	}
	// Value rounds a fractional byte count up, so a request is never shortened.
	n := q.Value()
	if n <= 0 {
		return bad("requested size %s is not positive", q.String())
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	if reclaim != corev1.PersistentVolumeReclaimDelete && reclaim != corev1.PersistentVolumeReclaimRetain {
		return bad("StorageClass %q has reclaim policy %q; use Delete or Retain", class.Name, reclaim)
	}
	return &request{
		id:      volumeIDFor(pvc.UID),
		mode:    mode,
		bytes:   n,
		size:    *resource.NewQuantity(n, resource.BinarySI),
		reclaim: reclaim,
		class:   class,
	}, nil
}

// buildPV is the PV for a provisioned claim. hostname is the value of this
// node's kubernetes.io/hostname label, which the scheduler matches against
// the node affinity; nodeLabel is this node's value of labelNode.
func buildPV(pvc *corev1.PersistentVolumeClaim, r *request, driver, hostname, nodeLabel string) *corev1.PersistentVolume {
	mode := r.mode
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        r.id,
			Labels:      map[string]string{labelNode: nodeLabel},
			Annotations: map[string]string{annProvisionedBy: driver},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: r.size},
			AccessModes:                   slices.Clone(pvc.Spec.AccessModes),
			PersistentVolumeReclaimPolicy: r.reclaim,
			StorageClassName:              r.class.Name,
			MountOptions:                  slices.Clone(r.class.MountOptions),
			VolumeMode:                    &mode,
			ClaimRef: &corev1.ObjectReference{
				Kind:       "PersistentVolumeClaim",
				APIVersion: "v1",
				Namespace:  pvc.Namespace,
				Name:       pvc.Name,
				UID:        pvc.UID,
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key:      names.TopologyKeyHostname,
						Operator: corev1.NodeSelectorOpIn,
						Values:   []string{hostname},
					}},
				}},
			}},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: r.id},
			},
		},
	}
}

// ownsVolume reports whether a PV is one this node provisioned: our driver,
// a handle in our format that matches the PV name, our provisioned-by
// annotation, and node affinity to exactly this node's hostname. A PV that
// fails any check (hand-edited, another driver, missing affinity) is left
// alone; the reason is returned for the log.
func ownsVolume(pv *corev1.PersistentVolume, driver, hostname string) (bool, string) {
	csi := pv.Spec.CSI
	switch {
	case csi == nil || csi.Driver != driver:
		return false, "not a volume of this driver"
	case csi.VolumeHandle != pv.Name:
		return false, fmt.Sprintf("volume handle %q does not match PV name", csi.VolumeHandle)
	case pv.Annotations[annProvisionedBy] != driver:
		return false, "not provisioned by this driver"
	}
	if _, ok := claimUIDOf(csi.VolumeHandle); !ok {
		return false, fmt.Sprintf("volume handle %q is not in this driver's format", csi.VolumeHandle)
	}
	if got, ok := affinityHostname(pv); !ok {
		return false, "node affinity is missing or malformed"
	} else if got != hostname {
		return false, fmt.Sprintf("node affinity names host %q, not this node", got)
	}
	return true, ""
}

// affinityHostname extracts the single hostname buildPV writes into a PV's
// node affinity.
func affinityHostname(pv *corev1.PersistentVolume) (string, bool) {
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

// recordedPolicy returns the volume a PV refers to and the reclaim policy to
// record for it on the node, or ok=false when the PV names no volume of this
// driver. Only a PV this node provisioned (ownsVolume), with policy Delete,
// records Delete: that is the one case in which syncVolume would remove the
// data, so it is the only one in which the orphan reconciler may remove it
// after the PV is gone. Every other policy (Retain, the deprecated Recycle,
// anything unknown) and every hand-edited PV records Retain.
func recordedPolicy(pv *corev1.PersistentVolume, driver, hostname string) (id string, p volume.ReclaimPolicy, ok bool) {
	csi := pv.Spec.CSI
	if csi == nil || csi.Driver != driver {
		return "", "", false
	}
	if _, ok := claimUIDOf(csi.VolumeHandle); !ok {
		return "", "", false
	}
	if owns, _ := ownsVolume(pv, driver, hostname); owns && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete {
		return csi.VolumeHandle, volume.ReclaimDelete, true
	}
	return csi.VolumeHandle, volume.ReclaimRetain, true
}
