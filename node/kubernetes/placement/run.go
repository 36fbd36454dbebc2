package placement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// byClass indexes CSIStorageCapacity objects by StorageClass.
const byClass = "class"

// run is one term as the placer: its informers, queue and memory. What
// it remembers (ledger, attempts) ends with the term.
type run struct {
	*Placer
	claims     cache.Indexer
	classes    storagelisters.StorageClassLister
	capacities cache.Indexer
	nodes      corelisters.NodeLister
	queue      *controller.BackoffQueue
	recorder   record.EventRecorder
	ledger     ledger
	attempts   attempts
	// said is the kind of the last NotPlaced Event per claim (verdict's
	// kind), so that each reason is told once, not at each look.
	said map[string]string
}

// place runs one term: it builds and starts the informers, and works
// the queue until ctx ends.
func (p *Placer) place(ctx context.Context) error {
	r := &run{Placer: p, said: map[string]string{}}
	// The unplaced claims only, selected on the API server: the placed
	// ones, however many, never reach the placer.
	claims := informers.NewSharedInformerFactoryWithOptions(p.cfg.Client, p.cfg.Resync,
		informers.WithTransform(ownership.StripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{ownership.LabelNode: ownership.LabelUnplaced}.String()
		}))
	// Capacity objects of Plinth's nodes (they carry the node label).
	capacities := informers.NewSharedInformerFactoryWithOptions(p.cfg.Client, p.cfg.Resync,
		informers.WithTransform(ownership.StripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			req, _ := labels.NewRequirement(ownership.LabelNode, selection.Exists, nil)
			o.LabelSelector = labels.NewSelector().Add(*req).String()
		}))
	// StorageClasses whole, Nodes by name and labels alone.
	cluster := informers.NewSharedInformerFactoryWithOptions(p.cfg.Client, p.cfg.Resync,
		informers.WithTransform(nodeLabelsOnly))

	claimInf := claims.Core().V1().PersistentVolumeClaims().Informer()
	capInf := capacities.Storage().V1().CSIStorageCapacities().Informer()
	if err := capInf.AddIndexers(cache.Indexers{byClass: func(o any) ([]string, error) {
		c, ok := o.(*storagev1.CSIStorageCapacity)
		if !ok {
			return nil, nil
		}
		return []string{c.StorageClassName}, nil
	}}); err != nil {
		return fmt.Errorf("indexing capacity objects: %w", err)
	}
	classInf := cluster.Storage().V1().StorageClasses()
	nodeInf := cluster.Core().V1().Nodes()
	r.claims, r.capacities = claimInf.GetIndexer(), capInf.GetIndexer()
	r.classes, r.nodes = classInf.Lister(), nodeInf.Lister()
	r.queue = controller.NewBackoffQueue("placement", p.cfg.Clock, controller.DefaultRetryBase, controller.DefaultRetryMax, nil)
	defer r.queue.ShutDown()
	var stopEvents func()
	r.recorder, stopEvents = controller.NewRecorder(ctx, p.cfg.EventClient, "plinth-placer", "")
	defer stopEvents()
	if err := r.handle(claimInf, capInf, classInf.Informer(), nodeInf.Informer()); err != nil {
		return err
	}
	stop, err := controller.StartInformers(ctx, claims, capacities, cluster)
	defer stop()
	if err != nil {
		return err
	}
	// Work returns once the queue is shut down, when the term ends.
	context.AfterFunc(ctx, r.queue.ShutDown)
	controller.Work(ctx, p.cfg.Log, r.queue, r.sync)
	return nil
}

// handle queues a claim when it changes, and every unplaced claim when
// what a placement is chosen from changes: a node's figures, a class, a
// node's labels.
func (r *run) handle(claims, capacities, classes, nodes cache.SharedIndexInformer) error {
	add := func(o any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			r.queue.Add(key)
		}
	}
	all := func() {
		for _, key := range r.claims.ListKeys() {
			r.queue.Add(key)
		}
	}
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: add, UpdateFunc: func(_, o any) { add(o) }, DeleteFunc: add,
	}); err != nil {
		return fmt.Errorf("watching claims: %w", err)
	}
	published := func(o any) {
		if c, ok := o.(*storagev1.CSIStorageCapacity); ok {
			r.ledger.published(capacityNode(c), r.cfg.Clock.Now())
		}
		all()
	}
	if _, err := capacities.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: published, UpdateFunc: func(_, o any) { published(o) }, DeleteFunc: func(any) { all() },
	}); err != nil {
		return fmt.Errorf("watching capacity: %w", err)
	}
	if _, err := classes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { all() }, UpdateFunc: func(_, _ any) { all() },
	}); err != nil {
		return fmt.Errorf("watching StorageClasses: %w", err)
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { all() },
		UpdateFunc: func(old, o any) {
			a, aok := old.(*corev1.Node)
			b, bok := o.(*corev1.Node)
			if !aok || !bok || !labels.Equals(a.Labels, b.Labels) {
				all()
			}
		},
	}); err != nil {
		return fmt.Errorf("watching Nodes: %w", err)
	}
	return nil
}

// nodeLabelsOnly keeps of a Node its name and labels, all the placer
// reads of it, so that the placer's memory does not hold every node's
// status; other objects pass as they are, less their managed fields.
func nodeLabelsOnly(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return ownership.StripManagedFields(o)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
	}}, nil
}

// capacityNode is the name of the node a capacity object is for: its
// owner, the Node (package capacity).
func capacityNode(c *storagev1.CSIStorageCapacity) string {
	for _, o := range c.OwnerReferences {
		if o.Kind == "Node" && o.APIVersion == "v1" {
			return o.Name
		}
	}
	return ""
}
