package resizer

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/logtree"
)

// run is the state of one incarnation of the controller. Its queue and
// handlers do not outlive Run; its claim and PV informers may be the
// process's shared ones (controller.Shared), kept current by their watches.
type run struct {
	*Controller
	log      logtree.LeveledLogger
	clock    clock.WithTicker
	hostname string // this node's kubernetes.io/hostname label value

	claims   *controller.OwnWrites[*corev1.PersistentVolumeClaim] // ours whole, others as stubs
	volumes  *controller.OwnWrites[*corev1.PersistentVolume]      // PVs of this node
	queue    *controller.BackoffQueue
	recorder record.EventRecorder
}

// ownWritesTTL bounds how long a written object overrides the informer's
// copy; the watch delivers it in milliseconds.
const ownWritesTTL = time.Minute

// Run resizes volumes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	inc, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer inc.Stop()
	r := &run{
		Controller: c,
		log:        inc.Log,
		clock:      c.Clock,
		hostname:   inc.Hostname,
		recorder:   inc.Recorder,
		queue:      controller.NewBackoffQueue("plinth-resizer", c.Clock, c.RetryBase, c.RetryMax, c.Metrics.WorkqueueProvider()),
		claims:     controller.NewOwnWrites[*corev1.PersistentVolumeClaim](inc.Claims.GetStore(), c.Clock, ownWritesTTL),
		volumes:    controller.NewOwnWrites[*corev1.PersistentVolume](inc.Volumes.GetStore(), c.Clock, ownWritesTTL),
	}
	defer r.queue.ShutDown()
	if err := r.watch(inc); err != nil {
		return err
	}
	if err := inc.Sync(ctx); err != nil {
		return err
	}
	r.log.Infof("resizer for driver %s on node %s (hostname %s) started", c.Driver, c.NodeName, r.hostname)
	return controller.Loops{
		Workers: []controller.Workers{{Queue: r.queue, Sync: r.syncClaim, Count: c.Workers}},
		Tasks:   []func(context.Context){func(ctx context.Context) { r.followRoom(ctx, inc.Claims.GetStore()) }},
	}.Run(ctx)
}

// watch connects the resizer's handlers to the incarnation's claim and PV
// informers.
func (r *run) watch(inc *controller.Incarnation) error {
	if _, err := inc.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onClaim,
		UpdateFunc: func(_, o any) { r.onClaim(o) },
	}); err != nil {
		return fmt.Errorf("watching PVCs: %w", err)
	}
	if _, err := inc.Volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onVolume,
		UpdateFunc: func(_, o any) { r.onVolume(o) },
	}); err != nil {
		return fmt.Errorf("watching PVs: %w", err)
	}
	return nil
}

// onClaim queues a bound claim of ours that has a resize to do. The check
// is the cheap part of syncClaim's; it keeps the queue free of the many
// updates that are not resizes.
func (r *run) onClaim(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || !r.bound(pvc) || !planFor(pvc).grow {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
		r.queue.Add(key)
	}
}

// roomInterval is how often the resizer looks for room for the resizes
// that did not fit, besides after every change the volume manager makes:
// space freed outside it (other files on the data filesystem removed) is
// noticed within this time.
const roomInterval = time.Minute

// followRoom queues the claims whose resize did not fit (plan.waiting)
// after every change of the data filesystem the volume manager makes and
// every roomInterval, until ctx ends; syncClaim tries those that fit now.
// It takes the next change's channel before it looks, so that a change
// meanwhile wakes it again.
func (r *run) followRoom(ctx context.Context, claims cache.Store) {
	tick := r.clock.NewTicker(roomInterval)
	defer tick.Stop()
	for {
		next := r.Volumes.Changed()
		for _, obj := range claims.List() {
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && r.bound(pvc) && planFor(pvc).waiting {
				if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
					r.queue.Add(key)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-next:
		case <-tick.C():
		}
	}
}

// onVolume queues the claim of a PV of this node, for a claim whose PV
// reached the cache after the claim did.
func (r *run) onVolume(obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return
	}
	if pvc, ok := r.claims.Get(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name); ok {
		r.onClaim(pvc)
	}
}

// bound reports whether a claim is ours, bound and not being deleted.
func (r *run) bound(pvc *corev1.PersistentVolumeClaim) bool {
	return ownership.OwnsClaim(pvc, r.Driver, r.NodeName) && pvc.Spec.VolumeName != "" &&
		pvc.Status.Phase == corev1.ClaimBound && pvc.DeletionTimestamp == nil
}
