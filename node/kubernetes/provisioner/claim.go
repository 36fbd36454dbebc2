package provisioner

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
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
	// rootDirMode is the mode of a filesystem volume's root directory
	// (zero for a block volume, which has none).
	rootDirMode fs.FileMode
	// overcommit is the class's over-commit ratio (volume.NoOvercommit
	// unless names.ParameterOvercommit says otherwise).
	overcommit volume.Overcommit
}

// supportedParameters lists the StorageClass parameters the driver
// understands. Unknown ones are refused rather than ignored: a user who
// asks for, say, a filesystem type must not get a volume that silently
// lacks it.
//
// rootDirMode (names.ParameterRootDirMode, octal such as "0770", see
// volume.ParseRootDirMode) is the mode of a filesystem volume's root
// directory; without it the root is volume.DefaultRootDirMode (0777), so
// that pods running as any user can write. A block claim of such a class
// is served as usual: a block volume has no directory, and the class
// speaks of the filesystem volumes made from it.
//
// overcommit (names.ParameterOvercommit, a ratio from 1, see
// volume.Overcommit) lets the class's volumes over-commit the room promised
// to filesystem volumes; the capacity published for the class uses the
// same ratio (volume.OvercommitParameter), so the scheduler and the provisioner agree.
var supportedParameters = map[string]bool{names.ParameterRootDirMode: true, names.ParameterOvercommit: true}

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
		return bad("StorageClass %q has unknown parameters %s; %s supports only %s", class.Name, strings.Join(unknown, ", "), driver,
			strings.Join(slices.Sorted(maps.Keys(supportedParameters)), ", "))
	}
	rootDirMode := volume.DefaultRootDirMode
	if v, ok := class.Parameters[names.ParameterRootDirMode]; ok {
		m, err := volume.ParseRootDirMode(v)
		if err != nil {
			return bad("StorageClass %q parameter %s: %v", class.Name, names.ParameterRootDirMode, err)
		}
		rootDirMode = m
	}
	overcommit, err := volume.OvercommitParameter(class.Parameters)
	if err != nil {
		return bad("StorageClass %q %v", class.Name, err)
	}
	if pvc.Spec.Selector != nil {
		return bad("claims with a selector are not supported (a selector picks existing volumes; this driver only provisions new ones)")
	}
	if pvc.Spec.DataSource != nil || pvc.Spec.DataSourceRef != nil {
		return bad("volume data sources (clones, snapshots, populators) are not supported")
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
	if mode == corev1.PersistentVolumeBlock {
		rootDirMode = 0
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
		id:          ownership.VolumeIDFor(pvc.UID),
		mode:        mode,
		bytes:       n,
		size:        *resource.NewQuantity(n, resource.BinarySI),
		reclaim:     reclaim,
		class:       class,
		rootDirMode: rootDirMode,
		overcommit:  overcommit,
	}, nil
}

// buildPV is the PV for a provisioned claim. hostname is the value of this
// node's kubernetes.io/hostname label, which the scheduler matches against
// the node affinity; nodeLabel is this node's value of ownership.LabelNode.
//
// The PV of a filesystem volume records in its volume attributes the mode
// its root directory was made with, the default included: the PV then
// says all it takes to make the volume again, whatever the class or the
// default become later. (The kubelet passes the attributes to the CSI
// plugin, which does not need them.)
func buildPV(pvc *corev1.PersistentVolumeClaim, r *request, driver, hostname, nodeLabel string) *corev1.PersistentVolume {
	mode := r.mode
	var attrs map[string]string
	if r.mode == corev1.PersistentVolumeFilesystem {
		attrs = map[string]string{names.ParameterRootDirMode: volume.FormatRootDirMode(r.rootDirMode)}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        r.id,
			Labels:      map[string]string{ownership.LabelNode: nodeLabel},
			Annotations: map[string]string{ownership.AnnProvisionedBy: driver},
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
