package provisioner

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/kubernetes/names"
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
	label    string // this node's value of labelNode

	claimIdx  cache.Indexer // our claims, and stubs of all others (see claimTransform)
	classes   storagelisters.StorageClassLister
	volumes   *ownWrites // PVs of this node, including our own fresh writes
	synced    []cache.InformerSynced
	claimQ    *backoffQueue
	volumeQ   *backoffQueue
	recorder  record.EventRecorder
	locks     keyLocks
	orphanMu  sync.Mutex
	firstSeen map[string]time.Time // orphan candidates and when we first saw them
	reported  map[string]bool      // entries left alone, already logged
	kept      map[string]bool      // unreferenced volumes kept (Retain), already reported
}

// Run provisions and deletes volumes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("configuring provisioner: %w", err)
	}
	log := c.Logger
	if log == nil {
		log = supervisor.Logger(ctx)
	}
	r := &run{
		Controller: c,
		log:        log,
		clock:      orDefault[clock.WithTicker](c.Clock, clock.RealClock{}),
		label:      nodeLabelValue(c.NodeName),
		firstSeen:  map[string]time.Time{},
		reported:   map[string]bool{},
		kept:       map[string]bool{},
	}
	var err error
	if r.hostname, err = r.lookupHostname(ctx); err != nil {
		return err
	}

	resync := orDefault(c.Resync, DefaultResync)
	// PVCs and StorageClasses: every one in the cluster (a claim becomes ours
	// only when the scheduler picks this node); foreign claims are stubbed by
	// the transform. PVs: only this node's, selected by label on the server.
	all := informers.NewSharedInformerFactoryWithOptions(c.Client, resync,
		informers.WithTransform(stripManagedFields))
	own := informers.NewSharedInformerFactoryWithOptions(c.Client, resync,
		informers.WithTransform(stripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{labelNode: r.label}.String()
		}))
	claimInf := all.Core().V1().PersistentVolumeClaims().Informer()
	if err := claimInf.SetTransform(claimTransform(c.Driver, c.NodeName)); err != nil {
		return fmt.Errorf("setting PVC transform: %w", err)
	}
	if err := claimInf.AddIndexers(cache.Indexers{uidIndex: indexByUID}); err != nil {
		return fmt.Errorf("adding PVC index: %w", err)
	}
	classInf := all.Storage().V1().StorageClasses().Informer()
	volInf := own.Core().V1().PersistentVolumes().Informer()
	r.claimIdx = claimInf.GetIndexer()
	r.classes = all.Storage().V1().StorageClasses().Lister()
	r.volumes = newOwnWrites(volInf.GetStore(), r.clock, time.Minute)
	r.synced = []cache.InformerSynced{claimInf.HasSynced, classInf.HasSynced, volInf.HasSynced}

	base, maxDelay := orDefault(c.RetryBase, defaultRetryBase), orDefault(c.RetryMax, defaultRetryMax)
	r.claimQ = newBackoffQueue("plinth-provisioner-claims", r.clock, base, maxDelay)
	r.volumeQ = newBackoffQueue("plinth-provisioner-volumes", r.clock, base, maxDelay)
	defer r.claimQ.ShutDown()
	defer r.volumeQ.ShutDown()

	events := orDefault[kubernetes.Interface](c.EventClient, c.Client)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	r.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c.Driver, Host: c.NodeName})

	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onClaim,
		UpdateFunc: func(_, o any) { r.onClaim(o) },
	}); err != nil {
		return fmt.Errorf("watching PVCs: %w", err)
	}
	if _, err := classInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onClass,
		UpdateFunc: func(_, o any) { r.onClass(o) },
	}); err != nil {
		return fmt.Errorf("watching StorageClasses: %w", err)
	}
	if _, err := volInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onVolume,
		UpdateFunc: func(_, o any) { r.onVolume(o) },
		DeleteFunc: func(o any) { r.onVolumeDeleted(ctx, o) },
	}); err != nil {
		return fmt.Errorf("watching PVs: %w", err)
	}

	// Informers stop with their own context, cancelled before Shutdown
	// waits for them, so every return path of Run leaves nothing running.
	ictx, stopInformers := context.WithCancel(ctx)
	defer all.Shutdown()
	defer own.Shutdown()
	defer stopInformers()
	all.Start(ictx.Done())
	own.Start(ictx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return ctx.Err()
	}
	// The initial list of every PVC in the cluster was decoded in full
	// before the transform shrank each to a stub: on a big cluster tens of
	// MB, now garbage. Hand it back to the OS now rather than whenever the
	// runtime's scavenger gets to it, so the node agent's footprint is what
	// it holds, not what it once listed. One GC, once per start.
	debug.FreeOSMemory()
	r.log.Infof("provisioner for driver %s on node %s (hostname %s) started", c.Driver, c.NodeName, r.hostname)
	if c.Logger == nil {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}

	var wg sync.WaitGroup
	for range orDefault(c.ClaimWorkers, DefaultClaimWorkers) {
		wg.Go(func() { r.work(ctx, r.claimQ, r.syncClaim) })
	}
	for range orDefault(c.VolumeWorkers, DefaultVolumeWorkers) {
		wg.Go(func() { r.work(ctx, r.volumeQ, r.syncVolume) })
	}
	wg.Go(func() { r.reconcileOrphansLoop(ctx) })
	<-ctx.Done()
	r.claimQ.ShutDown()
	r.volumeQ.ShutDown()
	wg.Wait()
	return ctx.Err()
}

// lookupHostname returns the kubernetes.io/hostname label of this node,
// which is what PV node affinity must match. A node whose kubelet has not
// registered yet has no Node object; its label will be the default the
// kubelet uses, the node name.
func (r *run) lookupHostname(ctx context.Context) (string, error) {
	node, err := r.Client.CoreV1().Nodes().Get(ctx, r.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.log.Warningf("node %s is not registered yet; using its name as hostname label", r.NodeName)
		return r.NodeName, nil
	case err != nil:
		return "", fmt.Errorf("looking up node %s: %w", r.NodeName, err)
	}
	if h := node.Labels[names.TopologyKeyHostname]; h != "" {
		return h, nil
	}
	return r.NodeName, nil
}

func (r *run) onClaim(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || !r.needsVolume(pvc) {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
		r.claimQ.Add(key)
	}
}

// claim returns our claim with key from the cache. Foreign claims are only
// stubs there and are reported as not found.
func (r *run) claim(key string) (*corev1.PersistentVolumeClaim, bool) {
	obj, exists, err := r.claimIdx.GetByKey(key)
	if err != nil || !exists {
		return nil, false
	}
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	return pvc, ok
}

// needsVolume reports whether a claim is ours and still waits for a volume.
func (r *run) needsVolume(pvc *corev1.PersistentVolumeClaim) bool {
	return ownsClaim(pvc, r.Driver, r.NodeName) && pvc.Spec.VolumeName == "" && pvc.DeletionTimestamp == nil
}

// onClass requeues our pending claims of a class that appeared or changed,
// so claims created before their StorageClass are provisioned without
// waiting for a resync.
func (r *run) onClass(obj any) {
	sc, ok := obj.(*storagev1.StorageClass)
	if !ok || sc.Provisioner != r.Driver {
		return
	}
	for _, o := range r.claimIdx.List() {
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok && r.needsVolume(pvc) &&
			pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == sc.Name {
			r.onClaim(pvc)
		}
	}
}

// onVolume queues every PV of this node: syncVolume records its reclaim
// policy on the node (an administrator may change it at any time) and
// deletes the volume of a released Delete PV.
func (r *run) onVolume(obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok {
		r.volumeQ.Add(pv.Name)
	}
}

// onVolumeDeleted records the reclaim policy of a deleted PV's last known
// state, right in the handler: once the PV has left the informer's store a
// queued key finds nothing, and a policy changed just before the deletion
// (patched to Retain, then deleted) must not be lost. The volume of a PV we
// deleted ourselves is gone by then, and recording is a no-op.
func (r *run) onVolumeDeleted(ctx context.Context, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return
	}
	if err := r.recordPolicy(ctx, pv); err != nil && ctx.Err() == nil {
		r.log.Errorf("PV %s was deleted and its reclaim policy could not be recorded on the node: %v", pv.Name, err)
	}
}

// work processes keys until the queue shuts down. A panic in sync (a bug, or
// an object shaped in a way nobody foresaw) is turned into an error for that
// key so one bad object cannot take the controller down.
func (r *run) work(ctx context.Context, q *backoffQueue, sync func(context.Context, string) error) {
	for {
		key, ok := q.Get()
		if !ok {
			return
		}
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic while processing %s: %v", key, p)
					r.log.Errorf("%v", err)
				}
			}()
			return sync(ctx, key)
		}()
		if err != nil && ctx.Err() == nil {
			r.log.Warningf("%s: %v (retry %d)", key, err, q.Failures(key)+1)
		}
		q.Done(key, err)
	}
}
