package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"source.plinth.dev/node/kubernetes/internal/datasource"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// A claim with a data source (a restore of a VolumeSnapshot, a clone of
// a claim) can be made only where its source's data is: the engine's
// copy is a copy-on-write clone within one node's data filesystem. So
// the placer puts it on the source's node, whatever its class's binding
// mode, and without the capacity figures (no other node could take it;
// one without room says so in its own Event).
//
// The kube-scheduler keeps a selected node once set: its volume binding
// (Kubernetes v1.34, pkg/scheduler/framework/plugins/volumebinding,
// binder.go FindPodVolumes) filters out every other node for a pod whose
// WaitForFirstConsumer claim already names one, and a pod whose claim
// binds immediately waits until the claim is bound. A WaitForFirstConsumer
// claim reaches the placer only once it carries the storage-provisioner
// annotation, which the PV controller sets when a node is first selected
// for it: the scheduler's first choice, if it is not the source's node,
// is handed back by that node (provisioner), and the placer places the
// claim then.

// sourceRetry is how often a claim whose source is not ready yet (a
// snapshot being taken, a source claim being provisioned) is looked at
// again: the placer watches no snapshots or source claims, and both are
// usually ready within seconds.
const sourceRetry = 5 * time.Second

// placeAtSource places a claim with a data source on the source's node,
// or says why not: the source is not ready (looked at again in
// sourceRetry), or cannot be copied (looked at again at the resync, or
// when the claim changes).
func (r *run) placeAtSource(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	src, err := datasource.Resolve(ctx, datasource.Clients{Core: r.cfg.Client, Snapshots: r.cfg.Snapshots}, r.cfg.Driver, pvc)
	switch {
	case errors.Is(err, datasource.ErrNotReady):
		r.sayOnce(key, pvc, "source not ready", fmt.Sprintf("Waiting for the claim's data source: %v. The placer looks again every %s.", err, sourceRetry))
		r.queue.AddAfter(key, sourceRetry)
		return nil
	case errors.Is(err, datasource.ErrUnusable):
		r.sayOnce(key, pvc, "source unusable", fmt.Sprintf("The claim cannot be placed: its data source %v.", err))
		return nil
	case err != nil:
		return fmt.Errorf("resolving the data source of claim %s: %w", ownership.DescribeClaim(pvc), err)
	}
	bytes := int64(0)
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		bytes = q.Value()
	}
	return r.placeWith(ctx, key, pvc, src.Node, bytes, fmt.Sprintf(
		"The claim is made from %s, which is on node %s: the placer put it there, where its volume is copied (StorageClass %s)", src.Name, src.Node, class.Name))
}
