package snapshots

import (
	"context"
	"fmt"
	"time"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// run is the state of one incarnation of the controller; nothing in it
// outlives Run.
type run struct {
	*Controller
	log      logtree.LeveledLogger
	contents *controller.OwnWrites[*crdv1.VolumeSnapshotContent]
	queue    *controller.BackoffQueue
	recorder record.EventRecorder
}

// ownWritesTTL bounds how long a written content overrides the
// informer's copy; the watch delivers it in milliseconds.
const ownWritesTTL = time.Minute

// Run acts on this node's VolumeSnapshotContents until ctx ends. In a
// cluster that does not serve the snapshot API it waits for it, healthy:
// snapshots are an add-on a cluster may lack, not a fault of the node.
func (c *Controller) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	if errs := validation.IsValidLabelValue(c.NodeName); len(errs) > 0 {
		// The snapshot-controller labels a content with the node's name,
		// which cannot be a label value: it makes no contents for it.
		log.Warningf("node name %q cannot be a label value (%v): the snapshot-controller cannot label snapshot contents for this node, so none of its volumes can be snapshotted", c.NodeName, errs)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	if err := c.waitForAPI(ctx, log); err != nil {
		return err
	}
	recorder, stopEvents := controller.NewRecorder(ctx, c.EventClient, c.Driver, c.NodeName)
	defer stopEvents()
	factory := snapinformers.NewSharedInformerFactoryWithOptions(c.Snapshots, c.Resync,
		snapinformers.WithTransform(ownership.StripManagedFields),
		snapinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = c.selector() }))
	informer := factory.Snapshot().V1().VolumeSnapshotContents().Informer()
	r := &run{
		Controller: c,
		log:        log,
		recorder:   recorder,
		queue:      controller.NewBackoffQueue("plinth-snapshots", c.Clock, c.RetryBase, c.RetryMax, c.Metrics.WorkqueueProvider()),
		contents:   controller.NewOwnWrites[*crdv1.VolumeSnapshotContent](informer.GetStore(), c.Clock, ownWritesTTL),
	}
	defer r.queue.ShutDown()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueue,
		UpdateFunc: func(_, o any) { r.enqueue(o) },
	}); err != nil {
		return fmt.Errorf("watching VolumeSnapshotContents: %w", err)
	}
	ictx, stopInformers := context.WithCancel(ctx)
	defer func() {
		stopInformers()
		factory.Shutdown()
	}()
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("syncing the VolumeSnapshotContent cache: %w", ctx.Err())
	}
	r.log.Infof("snapshot controller for driver %s on node %s started", c.Driver, c.NodeName)
	return controller.Loops{
		Workers: []controller.Workers{{Queue: r.queue, Sync: r.syncContent, Count: c.Workers}},
	}.Run(ctx)
}

// selector selects this node's contents on the API server.
func (c *Controller) selector() string {
	return labels.Set{ownership.LabelSnapshotManagedBy: c.NodeName}.String()
}

// waitForAPI returns once the API server serves VolumeSnapshotContents
// (a list of at most one of this node's), and waits while it does not,
// saying so once: the CRDs are installed with the snapshot-controller,
// perhaps after the node starts (docs/operating.md). Any other error ends
// Run, to be retried by the supervisor.
func (c *Controller) waitForAPI(ctx context.Context, log logtree.LeveledLogger) error {
	said := false
	for {
		_, err := c.Snapshots.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{LabelSelector: c.selector(), Limit: 1})
		switch {
		case err == nil:
			if said {
				log.Infof("the snapshot API is served now")
			}
			return nil
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("looking for the snapshot API: %w", err)
		case !said:
			log.Infof("the cluster does not serve the snapshot API (snapshot.storage.k8s.io/v1 VolumeSnapshotContents): no snapshots until it does; looking again every %s", c.APIPoll)
			said = true
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.Clock.After(c.APIPoll):
		}
	}
}

// enqueue queues a content that asks something of this node. The check is
// planFor's, the cheap part of syncContent's; it keeps ready contents,
// which are most of them, out of the queue.
func (r *run) enqueue(obj any) {
	content, ok := obj.(*crdv1.VolumeSnapshotContent)
	if !ok || !r.ours(content) || planFor(content).step == idle {
		return
	}
	r.queue.Add(content.Name)
}

// ours reports whether a content is this node's and this driver's: the
// label selector brings only this node's, and this is the second wall.
func (r *run) ours(c *crdv1.VolumeSnapshotContent) bool {
	return c.Spec.Driver == r.Driver && c.Labels[ownership.LabelSnapshotManagedBy] == r.NodeName
}
