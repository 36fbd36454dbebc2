package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// Shared is the claim and PV informers of one node process, which every
// controller's incarnation reads instead of building its own: with an
// informer per controller the API server sent each claim change to the
// node once per controller (bench/fleet: 2 events per node and change,
// provisioner and resizer).
//
// The informers outlive the incarnations: an incarnation adds its handlers
// (which first receive every object in the cache, as after a fresh list)
// and removes them when it stops. The caches stay current through their
// watches, which relist by themselves after an error.
type Shared struct {
	cluster, node   informers.SharedInformerFactory
	claims, volumes cache.SharedIndexInformer
}

// NewShared builds (does not start) the shared informers for b, which
// must be complete.
func NewShared(b Base) (*Shared, error) {
	if err := b.Complete("shared informers"); err != nil {
		return nil, err
	}
	s := &Shared{
		cluster: informers.NewSharedInformerFactoryWithOptions(b.Client, b.Resync,
			informers.WithTransform(ownership.StripManagedFields)),
		node: b.NodeInformers(),
	}
	var err error
	if s.claims, err = claimInformer(s.cluster, b); err != nil {
		return nil, err
	}
	s.volumes = s.node.Core().V1().PersistentVolumes().Informer()
	return s, nil
}

// Run runs the shared informers until ctx ends.
func (s *Shared) Run(ctx context.Context) {
	s.cluster.Start(ctx.Done())
	s.node.Start(ctx.Done())
	<-ctx.Done()
	s.cluster.Shutdown()
	s.node.Shutdown()
}

// claimInformer is the claim informer of factory: only this node's
// claims, selected on the API server by their node
// label (ownership.ClaimSelector), so that other nodes' claims never
// reach this node; kept whole but for their managedFields, and indexed
// by UID (ownership.UIDIndex). ownership.ClaimTransform stays as a second
// wall: a claim the label wrongly brings here is kept only as a stub.
func claimInformer(factory informers.SharedInformerFactory, b Base) (cache.SharedIndexInformer, error) {
	selector := ownership.ClaimSelector(b.NodeName)
	inf := factory.InformerFor(&corev1.PersistentVolumeClaim{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPersistentVolumeClaimInformer(client, metav1.NamespaceAll, resync, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = selector })
	})
	if err := inf.SetTransform(ownership.ClaimTransform(b.Driver, b.NodeName)); err != nil {
		return nil, fmt.Errorf("setting PVC transform: %w", err)
	}
	if err := inf.AddIndexers(cache.Indexers{ownership.UIDIndex: ownership.IndexByUID}); err != nil {
		return nil, fmt.Errorf("adding PVC index: %w", err)
	}
	return inf, nil
}

// handlers is a shared informer as one incarnation sees it: the handlers
// it adds are remembered, so that the incarnation removes them when it
// stops and a later one does not find them still called.
type handlers struct {
	cache.SharedIndexInformer
	mu   sync.Mutex
	regs []cache.ResourceEventHandlerRegistration
}

func (h *handlers) remember(reg cache.ResourceEventHandlerRegistration, err error) (cache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		h.mu.Lock()
		h.regs = append(h.regs, reg)
		h.mu.Unlock()
	}
	return reg, err
}

func (h *handlers) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return h.remember(h.SharedIndexInformer.AddEventHandler(handler))
}

func (h *handlers) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, period time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return h.remember(h.SharedIndexInformer.AddEventHandlerWithResyncPeriod(handler, period))
}

func (h *handlers) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, opts cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return h.remember(h.SharedIndexInformer.AddEventHandlerWithOptions(handler, opts))
}

// removeAll removes the handlers added through h.
func (h *handlers) removeAll() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, reg := range h.regs {
		errs = append(errs, h.SharedIndexInformer.RemoveEventHandler(reg))
	}
	h.regs = nil
	return errors.Join(errs...)
}

// synced reports whether the informer's cache is filled and every handler
// added through h has received its objects.
func (h *handlers) synced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.HasSynced() {
		return false
	}
	for _, reg := range h.regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}
