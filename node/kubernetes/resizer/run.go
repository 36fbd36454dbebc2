package resizer

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// run is the state of one incarnation of the controller. Nothing in it
// outlives Run, so a restarted controller never sees a stale cache or queue.
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
	r := &run{Controller: c, log: supervisor.Logger(ctx), clock: c.Clock}
	var err error
	if r.hostname, err = ownership.NodeHostname(ctx, c.Client, c.NodeName, r.log); err != nil {
		return err
	}
	r.queue = controller.NewBackoffQueue("plinth-resizer", r.clock, c.RetryBase, c.RetryMax)
	defer r.queue.ShutDown()
	var stopEvents func()
	r.recorder, stopEvents = controller.NewRecorder(ctx, c.EventClient, c.Driver, c.NodeName)
	defer stopEvents()

	// Informers stop with their own context, cancelled before their
	// factories' Shutdown waits for them.
	ictx, stopInformers := context.WithCancel(ctx)
	shutdown, err := r.startInformers(ictx)
	defer shutdown()
	defer stopInformers()
	if err != nil {
		return err
	}
	r.log.Infof("resizer for driver %s on node %s (hostname %s) started", c.Driver, c.NodeName, r.hostname)
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	var wg sync.WaitGroup
	for range c.Workers {
		wg.Go(func() { controller.Work(ctx, r.log, r.queue, r.syncClaim) })
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return ctx.Err()
}

// startInformers builds the claim and PV informers, connects their
// handlers, starts them and waits for their caches. The returned shutdown
// waits for them to stop once ctx is cancelled; it is valid even when err
// is not nil.
func (r *run) startInformers(ctx context.Context) (shutdown func(), err error) {
	// Claims: every one in the cluster, foreign ones as stubs (the same
	// transform as the provisioner's). PVs: only this node's, selected by
	// label on the server.
	all := informers.NewSharedInformerFactoryWithOptions(r.Client, r.Resync,
		informers.WithTransform(ownership.StripManagedFields))
	own := informers.NewSharedInformerFactoryWithOptions(r.Client, r.Resync,
		informers.WithTransform(ownership.StripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{ownership.LabelNode: ownership.NodeLabelValue(r.NodeName)}.String()
		}))
	shutdown = func() { all.Shutdown(); own.Shutdown() }
	claimInf := all.Core().V1().PersistentVolumeClaims().Informer()
	if err := claimInf.SetTransform(ownership.ClaimTransform(r.Driver, r.NodeName)); err != nil {
		return shutdown, fmt.Errorf("setting PVC transform: %w", err)
	}
	volInf := own.Core().V1().PersistentVolumes().Informer()
	r.claims = controller.NewOwnWrites[*corev1.PersistentVolumeClaim](claimInf.GetStore(), r.clock, ownWritesTTL)
	r.volumes = controller.NewOwnWrites[*corev1.PersistentVolume](volInf.GetStore(), r.clock, ownWritesTTL)
	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onClaim,
		UpdateFunc: func(_, o any) { r.onClaim(o) },
	}); err != nil {
		return shutdown, fmt.Errorf("watching PVCs: %w", err)
	}
	if _, err := volInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onVolume,
		UpdateFunc: func(_, o any) { r.onVolume(o) },
	}); err != nil {
		return shutdown, fmt.Errorf("watching PVs: %w", err)
	}
	all.Start(ctx.Done())
	own.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), claimInf.HasSynced, volInf.HasSynced) {
		return shutdown, ctx.Err()
	}
	return shutdown, nil
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
