package ownership

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Which unplaced claims are placed without a scheduler, and where. The
// admission server's placer (package placement) places a claim of a
// class that binds immediately, which no scheduler places, on a node its
// topology admits. No node agent places a claim, on itself or elsewhere:
// the claims admission policy refuses it (clusterobjects).

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
