package placement

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/datasource"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// sync looks at one unplaced claim: if it is the placer's to place, it
// chooses a node and places the claim there, or says why it cannot yet.
func (r *run) sync(ctx context.Context, key string) error {
	pvc, class := r.claimToPlace(key)
	if pvc == nil {
		delete(r.said, key)
		return nil
	}
	if datasource.Ref(pvc) != nil {
		return r.placeAtSource(ctx, key, pvc, class)
	}
	bytes := int64(0)
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		bytes = q.Value()
	}
	now := r.cfg.Clock.Now()
	v := pick(pvc.UID, bytes, r.offers(class, pvc.UID), now)
	if v.node == "" {
		r.notPlaced(key, pvc, v)
		if !v.retry.IsZero() {
			r.queue.AddAfter(key, v.retry.Sub(now))
		}
		return nil
	}
	return r.placeOn(ctx, key, pvc, class, v.node, bytes)
}

// claimToPlace returns the cached claim of key and its class when the
// claim is one to place: it asks the driver for a volume, is unplaced
// and unbound, its class binds immediately or it has a data source (which
// decides its node, whatever the binding mode: placeAtSource), and the
// cache does not still show the version a placement was just made from. A claim no node
// could serve as it is (no size, say) is placed all the same: the node
// it lands on says why in a ProvisioningFailed Event.
func (r *run) claimToPlace(key string) (*corev1.PersistentVolumeClaim, *storagev1.StorageClass) {
	o, ok, err := r.claims.GetByKey(key)
	if err != nil || !ok {
		return nil, nil
	}
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok || !ownership.ClaimUnplaced(pvc, r.cfg.Driver) || pvc.Spec.StorageClassName == nil {
		return nil, nil
	}
	class, err := r.classes.Get(*pvc.Spec.StorageClassName)
	if err != nil || class.Provisioner != r.cfg.Driver || !ownership.BindsImmediately(class) && datasource.Ref(pvc) == nil {
		// A class not seen yet queues every claim when it comes.
		return nil, nil
	}
	if r.attempts.stale(pvc.UID, pvc.ResourceVersion) {
		return nil, nil
	}
	return pvc, class
}

// offers lists every node that publishes capacity for class, with its
// room and whether it may be tried for the claim uid.
func (r *run) offers(class *storagev1.StorageClass, uid types.UID) []offer {
	objs, _ := r.capacities.ByIndex(byClass, class.Name)
	now := r.cfg.Clock.Now()
	var offers []offer
	for _, o := range objs {
		c, ok := o.(*storagev1.CSIStorageCapacity)
		if !ok || c.Capacity == nil {
			continue
		}
		name := capacityNode(c)
		node, err := r.nodes.Get(name)
		if err != nil {
			// No Node: no pod could use a volume there.
			continue
		}
		offers = append(offers, offer{
			node:      name,
			room:      c.Capacity.Value() - r.ledger.owed(name, now),
			admitted:  ownership.TopologyAdmits(class.AllowedTopologies, node.Labels),
			heldUntil: r.attempts.heldUntil(uid, name),
		})
	}
	return offers
}

// placeOn sets the claim's selected-node annotation to node, in a patch
// conditional on the version the choice was made from: a claim that
// changed meanwhile is looked at again as it is now.
func (r *run) placeOn(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, node string, bytes int64) error {
	return r.placeWith(ctx, key, pvc, node, bytes, fmt.Sprintf("StorageClass %s binds immediately; the placer chose node %s, which provisions the volume", class.Name, node))
}

// placeWith is placeOn with the Event's message why.
func (r *run) placeWith(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, node string, bytes int64, why string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pvc.ResourceVersion,
		"annotations":     map[string]string{ownership.AnnSelectedNode: node},
	}})
	if err != nil {
		return fmt.Errorf("encoding the placement of claim %s: %w", ownership.DescribeClaim(pvc), err)
	}
	placed, err := r.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return nil // the informer brings the claim as it is now
	case err != nil:
		return fmt.Errorf("placing claim %s on node %s: %w", ownership.DescribeClaim(pvc), node, err)
	}
	now := r.cfg.Clock.Now()
	r.ledger.promise(node, bytes, now)
	r.attempts.placed(pvc.UID, pvc.ResourceVersion, node, now)
	delete(r.said, key)
	r.cfg.Log.Infof("placed claim %s on node %s: %s", ownership.DescribeClaim(placed), node, why)
	r.recorder.Event(placed, corev1.EventTypeNormal, ReasonPlaced, why)
	return nil
}

// notPlaced says why the claim waits, once for each kind of reason.
func (r *run) notPlaced(key string, pvc *corev1.PersistentVolumeClaim, v verdict) {
	r.sayOnce(key, pvc, v.kind, fmt.Sprintf("Waiting for a node to take the claim: %s. The placer tries again when a node's capacity changes.", v.why))
}

// sayOnce sends a NotPlaced Event with msg, unless the last one for the
// claim was of the same kind.
func (r *run) sayOnce(key string, pvc *corev1.PersistentVolumeClaim, kind, msg string) {
	if r.said[key] == kind {
		return
	}
	r.said[key] = kind
	r.cfg.Log.Infof("not placing claim %s yet: %s", ownership.DescribeClaim(pvc), msg)
	r.recorder.Event(pvc, corev1.EventTypeWarning, ReasonNotPlaced, msg)
}
