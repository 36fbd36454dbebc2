package provisioner

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
)

// The controller must watch every PVC in the cluster (a claim becomes ours
// only when the scheduler annotates it), yet on a big cluster almost all of
// them belong to other nodes or drivers. The informer transform below keeps
// only a stub of those: a PartialObjectMetadata with the name and namespace
// the informer's store needs for its key, nothing else (not even in an
// index). Our own claims keep their spec but lose managedFields, which are
// often the largest part of an object and which the controller never reads.
// Code reading the claim cache must therefore type-check what it finds.

// claimTransform returns the informer transform for PVCs of this node.
func claimTransform(driver, nodeName string) cache.TransformFunc {
	return func(obj any) (any, error) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			// Tombstones and anything unexpected pass through untouched.
			return obj, nil
		}
		if ownsClaim(pvc, driver, nodeName) {
			pvc.ManagedFields = nil
			return pvc, nil
		}
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name:      pvc.Name,
			Namespace: pvc.Namespace,
		}}, nil
	}
}

// stripManagedFields is the transform for objects the controller keeps whole.
func stripManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// uidIndex indexes our claims by UID, so the orphan check can tell in O(1)
// whether the claim a volume was made for still exists. Stubs of foreign
// claims are not indexed (an index entry costs more than the stub). A claim
// that stopped being ours before its volume got a PV (the scheduler picked
// another node) thus makes the volume an orphan, which is right: the
// volume was never bound, so it holds no data, and the claim is served
// elsewhere.
const uidIndex = "uid"

func indexByUID(obj any) ([]string, error) {
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		return []string{string(pvc.UID)}, nil
	}
	return nil, nil
}

// nodeLabelValue is the value of labelNode for a node. Node names may be up to
// 253 characters but label values only 63, so long or otherwise unusable
// names are replaced by a hash (stable across restarts, which is all the
// label selector needs).
func nodeLabelValue(nodeName string) string {
	if len(validation.IsValidLabelValue(nodeName)) == 0 {
		return nodeName
	}
	sum := sha256.Sum256([]byte(nodeName))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}
