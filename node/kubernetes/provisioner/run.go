package provisioner

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/keymutex"
	"source.plinth.dev/pkg/logtree"
)

// run is the state of one incarnation of the controller. Its queues and
// handlers do not outlive Run; its claim and PV informers may be the
// process's shared ones (controller.Shared), kept current by their watches.
type run struct {
	*Controller
	log      logtree.LeveledLogger
	clock    clock.WithTicker
	hostname string // this node's kubernetes.io/hostname label value
	label    string // this node's value of ownership.LabelNode

	claimIdx  cache.Indexer // our claims, and stubs of all others (see ownership.ClaimTransform)
	classes   storagelisters.StorageClassLister
	volumes   *controller.OwnWrites[*corev1.PersistentVolume] // PVs of this node, including our own fresh writes
	claimQ    *controller.BackoffQueue
	volumeQ   *controller.BackoffQueue
	recorder  record.EventRecorder
	locks     keymutex.Set // per volume ID: claim workers vs. the orphan reconciler
	orphanMu  sync.Mutex
	firstSeen map[string]time.Time // orphan candidates and when we first saw them
	reported  map[string]bool      // entries left alone, already logged
	kept      map[string]bool      // unreferenced volumes kept (Retain), already reported

	bindRefused atomic.Bool // a binding write was refused and said so (see bindFailed)
	// handBackRefused: a hand-back was refused and said so (see handBack).
	handBackRefused atomic.Bool

	// elsewhere holds the UIDs of claims whose PV another node made
	// (madeElsewhere), reported once: until that PV goes, their syncs
	// make no volume. Entries are as rare as such PVs.
	elsewhere sync.Map

	holds holds // see handBack

	// clusterMu guards recordedCluster: the cluster was recorded on the
	// node by this incarnation (recordCluster). otherCluster: the node
	// said it is connected to another cluster (reportOtherCluster).
	clusterMu       sync.Mutex
	recordedCluster bool
	otherCluster    atomic.Bool
}

// Run provisions and deletes volumes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	inc, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer inc.Stop()
	r := c.newRun(inc)
	defer r.claimQ.ShutDown()
	defer r.volumeQ.ShutDown()
	if err := r.watch(ctx, inc); err != nil {
		return err
	}
	if err := inc.Sync(ctx); err != nil {
		return err
	}
	// The initial list of every PVC in the cluster was decoded in full
	// before the transform shrank each to a stub: on a big cluster tens of
	// MB, now garbage. Hand it back to the OS now rather than whenever the
	// runtime's scavenger gets to it, so the node agent's footprint is what
	// it holds, not what it once listed. One GC, once per start.
	debug.FreeOSMemory()
	r.log.Infof("provisioner for driver %s on node %s (hostname %s) started", c.Driver, c.NodeName, r.hostname)
	r.reportUnenforcedCapacity()
	var tasks []func(context.Context)
	if c.TestOnlyNoOrphanRemoval {
		r.log.Warningf("orphan removal is off (a test-only setting): volumes without PV and claim stay")
	} else {
		tasks = append(tasks, r.reconcileOrphansLoop)
	}
	return controller.Loops{
		Workers: []controller.Workers{
			{Queue: r.claimQ, Sync: r.syncClaim, Count: c.ClaimWorkers},
			{Queue: r.volumeQ, Sync: r.syncVolume, Count: c.VolumeWorkers},
		},
		Tasks: tasks,
	}.Run(ctx)
}

// newRun starts the state of the incarnation inc, with queues of its own;
// watch connects it to inc's informers.
func (c *Controller) newRun(inc *controller.Incarnation) *run {
	return &run{
		Controller: c,
		log:        inc.Log,
		clock:      c.Clock,
		hostname:   inc.Hostname,
		label:      ownership.NodeLabelValue(c.NodeName),
		recorder:   inc.Recorder,
		claimQ:     controller.NewBackoffQueue("plinth-provisioner-claims", c.Clock, c.RetryBase, c.RetryMax, c.Metrics.WorkqueueProvider()),
		volumeQ:    controller.NewBackoffQueue("plinth-provisioner-volumes", c.Clock, c.RetryBase, c.RetryMax, c.Metrics.WorkqueueProvider()),
		firstSeen:  map[string]time.Time{},
		reported:   map[string]bool{},
		kept:       map[string]bool{},
	}
}

// reportUnenforcedCapacity tells the cluster, with a Warning Event on this
// node, that its data directory cannot enforce the size of filesystem
// volumes, and what follows from it. The node's log says so at start too,
// but an operator who installed Plinth with kubectl looks at Events
// (kubectl describe node) before pod logs; the claims that are refused get
// their own Event as well.
func (r *run) reportUnenforcedCapacity() {
	reason, allowed := r.Volumes.UnenforcedCapacity()
	if reason == nil {
		return
	}
	consequence := "filesystem claims are refused (block claims work); prepare an XFS data directory mounted with prjquota, or pass " + volume.AllowUnenforcedCapacityFlag + " to accept volumes that can outgrow their size"
	if allowed {
		consequence = "filesystem volumes are provisioned anyway (" + volume.AllowUnenforcedCapacityFlag + ") and can fill the data filesystem"
	}
	r.recorder.Eventf(r.nodeRef(), corev1.EventTypeWarning, ReasonCapacityNotEnforced,
		"The data directory of Plinth storage on this node cannot enforce volume sizes (%v): %s", reason, consequence)
}

// watch adds what the provisioner needs to the incarnation's informers
// (StorageClasses) and connects its handlers.
func (r *run) watch(ctx context.Context, inc *controller.Incarnation) error {
	classInf := inc.Cluster.Storage().V1().StorageClasses().Informer()
	r.claimIdx = inc.Claims.GetIndexer()
	r.classes = inc.Cluster.Storage().V1().StorageClasses().Lister()
	r.volumes = controller.NewOwnWrites[*corev1.PersistentVolume](inc.Volumes.GetStore(), r.clock, time.Minute)
	if _, err := inc.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	if _, err := inc.Volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onVolume,
		UpdateFunc: func(_, o any) { r.onVolume(o) },
		DeleteFunc: func(o any) { r.onVolumeDeleted(ctx, o) },
	}); err != nil {
		return fmt.Errorf("watching PVs: %w", err)
	}
	return nil
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
	return ownership.OwnsClaim(pvc, r.Driver, r.NodeName) && pvc.Spec.VolumeName == "" && pvc.DeletionTimestamp == nil
}

// onClass requeues our pending claims of a class that
// appeared or changed, at once: claims created before their StorageClass
// are provisioned without waiting for a resync or for the backoff their
// failures (the class was missing) built up.
func (r *run) onClass(obj any) {
	sc, ok := obj.(*storagev1.StorageClass)
	if !ok || sc.Provisioner != r.Driver {
		return
	}
	r.requeueClaims(r.claimQ.Retry, func(pvc *corev1.PersistentVolumeClaim) bool {
		return r.needsVolume(pvc) && pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == sc.Name
	})
}

// requeueClaims passes the key of every claim in the informer's store that
// match accepts to queue (the claim queue's Add, or its Retry to skip the
// backoff).
func (r *run) requeueClaims(queue func(key string), match func(*corev1.PersistentVolumeClaim) bool) {
	for _, o := range r.claimIdx.List() {
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok && match(pvc) {
			if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
				queue(key)
			}
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
// deleted ourselves is gone by then, and recording is a no-op. A deletion
// the watch missed (the informer found the PV gone when it listed again)
// has no final state: the policy might have been changed in the gap, so
// the data is kept, as for Retain, rather than deleted on a guess.
func (r *run) onVolumeDeleted(ctx context.Context, obj any) {
	missed := false
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, missed = t.Obj, true
	}
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return
	}
	if missed && pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		r.log.Warningf("PV %s was deleted while this node's watch was interrupted, so its last reclaim policy is unknown; keeping its volume's data as if it were Retain (remove the volume by hand if it is not needed)", pv.Name)
		pv = pv.DeepCopy()
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if err := r.recordPolicy(ctx, pv); err != nil && ctx.Err() == nil {
		r.log.Errorf("PV %s was deleted and its reclaim policy could not be recorded on the node: %v", pv.Name, err)
	}
}
