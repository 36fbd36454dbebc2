package ownership

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Which nodes may place an unplaced claim on themselves. The provisioner
// places a claim of its driver that no scheduler will place (its class
// binds immediately) on a node its class's topology admits; the admission
// webhook refuses any other placement by a node agent, so that a node
// cannot draw to itself a claim whose pods the scheduler would send
// elsewhere. The two must agree, or a node would offer itself and be
// refused, or be let take what its provisioner never would: so the rule
// is here, once.

// BindsImmediately reports whether claims of class are bound without
// waiting for a pod, so that no scheduler places them: the mode is
// Immediate, or unset (the API server defaults it to Immediate).
func BindsImmediately(class *storagev1.StorageClass) bool {
	return class.VolumeBindingMode == nil || *class.VolumeBindingMode == storagev1.VolumeBindingImmediate
}

// TopologyAdmits reports whether a node with nodeLabels may hold a volume
// of a class with allowedTopologies terms: no terms admit every node;
// otherwise one term must match, and a term matches when every
// expression's key has one of its values among the labels.
func TopologyAdmits(terms []corev1.TopologySelectorTerm, nodeLabels map[string]string) bool {
	if len(terms) == 0 {
		return true
	}
	for _, term := range terms {
		ok := true
		for _, e := range term.MatchLabelExpressions {
			v, has := nodeLabels[e.Key]
			if !has || !slices.Contains(e.Values, v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
