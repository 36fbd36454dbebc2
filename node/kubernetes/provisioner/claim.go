package provisioner

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/classparams"
	"source.plinth.dev/node/kubernetes/internal/datasource"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// errInvalidClaim marks a request that cannot succeed until a user changes
// the claim or its StorageClass; it is reported, not retried with backoff.
var errInvalidClaim = errors.New("invalid claim")

// request is a validated provisioning request.
type request struct {
	id      string
	mode    corev1.PersistentVolumeMode
	bytes   int64
	size    resource.Quantity
	reclaim corev1.PersistentVolumeReclaimPolicy
	class   *storagev1.StorageClass
	// params are what the class asks of its volumes.
	params classparams.Params
	// source is what the volume is copied from (restore.go); nil for an
	// empty volume.
	source *datasource.Source
}

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
	params, err := classparams.Parse(class.Parameters)
	if err != nil {
		return bad("StorageClass %q: %v", class.Name, err)
	}
	if pvc.Spec.Selector != nil {
		return bad("claims with a selector are not supported (a selector picks existing volumes; this driver only provisions new ones)")
	}
	if err := datasource.Check(pvc); err != nil {
		return bad("%v", err)
	}
	if c := pvc.Spec.VolumeAttributesClassName; c != nil && *c != "" {
		// Kubernetes binds a claim only to a PV of the class it names; a
		// volume without it would be one the user did not ask for.
		return bad("volume attributes classes are not supported (the claim asks for %q); remove spec.volumeAttributesClassName", *c)
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
		id:      ownership.VolumeIDFor(pvc.UID),
		mode:    mode,
		bytes:   n,
		size:    *resource.NewQuantity(n, resource.BinarySI),
		reclaim: reclaim,
		class:   class,
		params:  params,
	}, nil
}

// volumeMode is the engine's name of the claim's volume mode.
func (r *request) volumeMode() volume.Mode {
	if r.mode == corev1.PersistentVolumeBlock {
		return volume.Block
	}
	return volume.Filesystem
}

// buildPV is the PV for a provisioned claim. hostname is the value of this
// node's kubernetes.io/hostname label, which the scheduler matches against
// the node affinity; node is this node's name, which the PV carries as
// its label ownership.LabelNode (hashed if long) and, in full, as its
// annotation ownership.AnnNodeName (what the admission policies read
// where the label is a hash).
//
// The PV of a filesystem volume records in its volume attributes the mode
// its root directory was made with, the default included: the PV then
// says all it takes to make the volume again, whatever the class or the
// default become later. A copy's records none: its root directory is its
// source's. (The kubelet passes the attributes to the CSI plugin, which
// does not need them.)
func buildPV(pvc *corev1.PersistentVolumeClaim, r *request, driver, hostname, node string) *corev1.PersistentVolume {
	mode := r.mode
	attrs := r.volumeAttributes()
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        r.id,
			Labels:      map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
			Annotations: map[string]string{ownership.AnnProvisionedBy: driver, ownership.AnnNodeName: node},
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
				CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: r.id, VolumeAttributes: attrs},
			},
		},
	}
}

// recordedPolicy returns the volume a PV refers to and the reclaim policy to
// record for it on the node, or ok=false when the PV names no volume of this
// driver. Only a PV this node provisioned (ownership.OwnsVolume), with policy Delete,
// records Delete: that is the one case in which syncVolume would remove the
// data, so it is the only one in which the orphan reconciler may remove it
// after the PV is gone. Every other policy (Retain, the deprecated Recycle,
// anything unknown) and every hand-edited PV records Retain.
func recordedPolicy(pv *corev1.PersistentVolume, driver, hostname string) (id string, p volume.ReclaimPolicy, ok bool) {
	csi := pv.Spec.CSI
	if csi == nil || csi.Driver != driver {
		return "", "", false
	}
	if _, ok := ownership.ClaimUIDOf(csi.VolumeHandle); !ok {
		return "", "", false
	}
	if owns, _ := ownership.OwnsVolume(pv, driver, hostname); owns && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete {
		return csi.VolumeHandle, volume.ReclaimDelete, true
	}
	return csi.VolumeHandle, volume.ReclaimRetain, true
}
