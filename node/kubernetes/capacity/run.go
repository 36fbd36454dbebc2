package capacity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/kubernetes/classparams"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// The objects of a node carry ownership.LabelNode, which the publisher's
// informer selects by, and the managed-by label below. The class is not a
// label (class names may be longer than label values): it is the object's
// storageClassName, and part of its name's hash.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "plinth-node"
)

// key is the queue's only key: every change makes the whole node's figures
// stale, and the queue's deduplication is the coalescing.
const key = "capacity"

// run is the state of one incarnation of the publisher.
type run struct {
	*Publisher
	log     logtree.LeveledLogger
	label   string
	classes storagelisters.StorageClassLister
	objects *controller.OwnWrites[*storagev1.CSIStorageCapacity]
	store   cache.Store
	queue   *controller.BackoffQueue

	mu        sync.Mutex
	published map[string]int64 // class -> bytes last written or found, for the log
}

// Run publishes the node's capacity until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	r := &run{
		Publisher: p,
		log:       supervisor.Logger(ctx),
		label:     ownership.NodeLabelValue(p.NodeName),
		queue:     controller.NewBackoffQueue("plinth-capacity", p.Clock, p.RetryBase, p.RetryMax, p.Metrics.WorkqueueProvider()),
		published: map[string]int64{},
	}
	defer r.queue.ShutDown()
	factories, err := r.watch()
	if err != nil {
		return err
	}
	stopInformers, err := controller.StartInformers(ctx, factories...)
	defer stopInformers()
	if err != nil {
		return err
	}
	r.removeElsewhere(ctx)
	r.log.Infof("publishing the capacity of node %s in namespace %s (at most every %s, and every %s)", p.NodeName, p.Namespace, p.MinInterval, p.Poll)
	return controller.Loops{
		Workers: []controller.Workers{{Queue: r.queue, Sync: r.sync, Count: 1}},
		Tasks: []func(context.Context){
			r.followVolumes,
			controller.Every(p.Clock, p.Poll, func(context.Context) { r.queue.Add(key) }),
		},
	}.Run(ctx)
}

// watch builds the publisher's informers, the cluster's StorageClasses
// and this node's capacity objects, and connects its handlers; the caller
// starts them.
func (r *run) watch() ([]informers.SharedInformerFactory, error) {
	cluster := informers.NewSharedInformerFactoryWithOptions(r.Client, r.Resync,
		informers.WithTransform(ownership.StripManagedFields))
	// This node's capacity objects, selected on the server.
	node := informers.NewSharedInformerFactoryWithOptions(r.Client, r.Resync,
		informers.WithNamespace(r.Namespace),
		informers.WithTransform(ownership.StripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{ownership.LabelNode: r.label}.String()
		}))
	classInf := cluster.Storage().V1().StorageClasses()
	objInf := node.Storage().V1().CSIStorageCapacities()
	r.classes = classInf.Lister()
	r.store = objInf.Informer().GetStore()
	r.objects = controller.NewOwnWrites[*storagev1.CSIStorageCapacity](r.store, r.Clock, time.Minute)
	stale := func(any) { r.queue.Add(key) }
	changed := cache.ResourceEventHandlerFuncs{AddFunc: stale, UpdateFunc: func(_, o any) { stale(o) }, DeleteFunc: stale}
	// Classes change what each class's figure is; our own objects only
	// matter when they disappear (the garbage collector, or someone by
	// hand). Volumes are followed by the volume manager's own signal
	// (followVolumes), not by their PVs: a volume's space is not all
	// written when its PV appears.
	for what, h := range map[string]struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		"StorageClasses":       {classInf.Informer(), changed},
		"CSIStorageCapacities": {objInf.Informer(), cache.ResourceEventHandlerFuncs{DeleteFunc: stale}},
	} {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("watching %s: %w", what, err)
		}
	}
	return []informers.SharedInformerFactory{cluster, node}, nil
}

// removeElsewhere deletes this node's capacity objects outside the
// namespace it publishes in: those an earlier incarnation published before
// the namespace was changed (--capacity-namespace). The scheduler reads
// every namespace, and would otherwise go on trusting their last figures
// until the Node is deleted. A failure is logged: the current figures are
// published all the same, and the next start tries again.
func (r *run) removeElsewhere(ctx context.Context) {
	sel := labels.Set{ownership.LabelNode: r.label, labelManagedBy: managedBy}.String()
	list, err := r.Client.StorageV1().CSIStorageCapacities(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		r.log.Warningf("looking for this node's capacity objects in other namespaces: %v", err)
		return
	}
	for _, c := range list.Items {
		if c.Namespace == r.Namespace {
			continue
		}
		uid := c.UID
		err := r.Client.StorageV1().CSIStorageCapacities(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.log.Warningf("removing the capacity of StorageClass %s in namespace %s, where this node no longer publishes: %v", c.StorageClassName, c.Namespace, err)
			continue
		}
		r.log.Infof("removed the capacity of StorageClass %s in namespace %s: this node publishes in %s now", c.StorageClassName, c.Namespace, r.Namespace)
	}
}

// followVolumes marks the figures stale after each change the volume
// manager makes, until ctx ends. It takes the next channel before marking,
// so a change while the figures are measured marks them again.
func (r *run) followVolumes(ctx context.Context) {
	next := r.Volumes.Changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next:
			next = r.Volumes.Changed()
			r.queue.Add(key)
		}
	}
}

// sync measures the data filesystem once and makes the node's objects say
// what it found, one per class of the driver, then holds the key for
// MinInterval: changes meanwhile mark it stale once, and are published
// together after that.
func (r *run) sync(ctx context.Context, _ string) error {
	err := r.publish(ctx)
	if err == nil {
		select {
		case <-ctx.Done():
		case <-r.Clock.After(r.MinInterval):
		}
	}
	return err
}

func (r *run) publish(ctx context.Context) error {
	node, err := r.Client.CoreV1().Nodes().Get(ctx, r.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s has no Node object yet: there is nothing to own its capacity (and no pod can be scheduled to it)", r.NodeName)
	} else if err != nil {
		return fmt.Errorf("reading node %s: %w", r.NodeName, err)
	}
	space, err := r.Volumes.Space(ctx)
	if err != nil {
		return err
	}
	classes, err := r.classes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing StorageClasses: %w", err)
	}
	want := map[string]*storagev1.CSIStorageCapacity{}
	for _, sc := range classes {
		if sc.Provisioner != r.Driver || sc.DeletionTimestamp != nil {
			continue
		}
		// A class whose parameters the provisioner refuses gets no
		// volume here at all: say so with a capacity of zero.
		var bytes int64
		if params, err := classparams.Parse(sc.Parameters); err == nil {
			bytes = space.Available(params.Overcommit)
		}
		obj := r.object(node, sc.Name, bytes)
		want[obj.Name] = obj
	}
	var errs []error
	for name, w := range want {
		if err := r.ensure(ctx, name, w); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range r.store.List() {
		c, ok := o.(*storagev1.CSIStorageCapacity)
		if !ok || want[c.Name] != nil {
			continue
		}
		uid := c.UID
		err := r.Client.StorageV1().CSIStorageCapacities(r.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting CSIStorageCapacity %s of a class that is gone: %w", c.Name, err))
			continue
		}
		r.log.Infof("removed the capacity of StorageClass %s (no longer a class of %s)", c.StorageClassName, r.Driver)
	}
	if len(errs) > 0 {
		return fmt.Errorf("publishing capacity: %w", errors.Join(errs...))
	}
	return nil
}

// ensure creates the object or updates it when its figures or owner
// differ, or replaces it when its topology does; an unchanged object costs
// no write.
func (r *run) ensure(ctx context.Context, name string, w *storagev1.CSIStorageCapacity) error {
	api := r.Client.StorageV1().CSIStorageCapacities(r.Namespace)
	have, ok := r.objects.Get(r.Namespace + "/" + name)
	var made *storagev1.CSIStorageCapacity
	var err error
	switch {
	case !ok:
		made, err = api.Create(ctx, w, metav1.CreateOptions{})
	case same(have, w):
		r.note(w)
		return nil
	case !equalSelector(have.NodeTopology, w.NodeTopology):
		// The API server keeps an object's topology as it was created; a
		// node whose hostname label changed gets a new object.
		uid := have.UID
		err = api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing CSIStorageCapacity %s of StorageClass %s, whose topology changed: %w", name, w.StorageClassName, err)
		}
		made, err = api.Create(ctx, w, metav1.CreateOptions{})
	default:
		upd := have.DeepCopy()
		upd.Labels, upd.OwnerReferences = w.Labels, w.OwnerReferences
		upd.Capacity, upd.MaximumVolumeSize = w.Capacity, w.MaximumVolumeSize
		made, err = api.Update(ctx, upd, metav1.UpdateOptions{})
	}
	if err != nil {
		// AlreadyExists or Conflict: the cache is behind; the retry
		// reads it again.
		return fmt.Errorf("writing CSIStorageCapacity %s of StorageClass %s: %w", name, w.StorageClassName, err)
	}
	r.objects.Remember(made)
	r.note(w)
	return nil
}

// note logs a class's figure when it differs from the last one logged.
func (r *run) note(w *storagev1.CSIStorageCapacity) {
	bytes := w.Capacity.Value()
	r.mu.Lock()
	prev, seen := r.published[w.StorageClassName]
	r.published[w.StorageClassName] = bytes
	r.mu.Unlock()
	if !seen || prev != bytes {
		r.log.Infof("capacity of StorageClass %s on node %s: %d bytes", w.StorageClassName, r.NodeName, bytes)
	}
}

// object is the CSIStorageCapacity of class on node.
func (r *run) object(node *corev1.Node, class string, bytes int64) *storagev1.CSIStorageCapacity {
	return &storagev1.CSIStorageCapacity{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ObjectName(r.NodeName, class),
			Namespace: r.Namespace,
			Labels:    map[string]string{ownership.LabelNode: r.label, labelManagedBy: managedBy},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		StorageClassName: class,
		NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{
			names.TopologyKeyHostname: ownership.Hostname(node),
		}},
		Capacity: resource.NewQuantity(bytes, resource.BinarySI),
	}
}

// ObjectName is the name of the CSIStorageCapacity of class on node:
// derived, so every incarnation finds the object of the one before, and
// hashed, since node and class names together may be longer than a name.
func ObjectName(node, class string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + class))
	return "plinth-" + hex.EncodeToString(sum[:])[:20]
}

// same reports whether have already says what w says.
func same(have, w *storagev1.CSIStorageCapacity) bool {
	eqQ := func(a, b *resource.Quantity) bool {
		return (a == nil) == (b == nil) && (a == nil || a.Cmp(*b) == 0)
	}
	return have.StorageClassName == w.StorageClassName &&
		eqQ(have.Capacity, w.Capacity) && eqQ(have.MaximumVolumeSize, w.MaximumVolumeSize) &&
		equalSelector(have.NodeTopology, w.NodeTopology) &&
		len(have.OwnerReferences) == 1 && have.OwnerReferences[0].UID == w.OwnerReferences[0].UID &&
		have.Labels[ownership.LabelNode] == w.Labels[ownership.LabelNode]
}

func equalSelector(a, b *metav1.LabelSelector) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.MatchExpressions) > 0 || len(a.MatchLabels) != len(b.MatchLabels) {
		return false
	}
	for k, v := range b.MatchLabels {
		if a.MatchLabels[k] != v {
			return false
		}
	}
	return true
}
