package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Defaults of Base's optional fields.
const (
	DefaultResync    = 10 * time.Minute
	DefaultRetryBase = 250 * time.Millisecond
	DefaultRetryMax  = 5 * time.Minute
)

// Base is the configuration every controller of the node shares. Client,
// Driver and NodeName are required; zero values of the other fields mean
// their defaults.
type Base struct {
	// Client is used for informers and all writes.
	Client kubernetes.Interface
	// EventClient sends Events. It should have its own rate limiter so that
	// Events never take request budget from volume work. Defaults to
	// Client.
	EventClient kubernetes.Interface
	// Driver is the provisioner and CSI driver name.
	Driver string
	// NodeName is this node's Node object name.
	NodeName string
	// Resync is the informer resync period.
	Resync time.Duration
	// RetryBase and RetryMax bound the per-key exponential retry backoff.
	RetryBase, RetryMax time.Duration
	// Clock is for tests; defaults to the real clock.
	Clock clock.WithTicker
	// Metrics, if set, counts the controller's operations and its work
	// queues.
	Metrics *metrics.Metrics
	// Shared, if set, are the process's claim and PV informers, which
	// Begin then uses instead of building its own; Shared.Run must be
	// running.
	Shared *Shared
}

// Complete checks the required fields and fills in the defaults; what
// names the controller in errors.
func (b *Base) Complete(what string) error {
	switch {
	case b.Client == nil:
		return fmt.Errorf("creating %s: no Kubernetes client", what)
	case b.Driver == "":
		return fmt.Errorf("creating %s: no driver name", what)
	case b.NodeName == "":
		return fmt.Errorf("creating %s: no node name", what)
	}
	b.EventClient = OrDefault(b.EventClient, b.Client)
	b.Resync = OrDefault(b.Resync, DefaultResync)
	b.RetryBase = OrDefault(b.RetryBase, DefaultRetryBase)
	b.RetryMax = OrDefault(b.RetryMax, DefaultRetryMax)
	b.Clock = OrDefault[clock.WithTicker](b.Clock, clock.RealClock{})
	return nil
}

// Incarnation is what one run of a controller starts from: its logger,
// this node's hostname label, an Event recorder, and informers of this
// node's claims (see claimInformer; indexed by UID,
// ownership.UIDIndex) and of this node's PVs, both selected by label on
// the server, so that other nodes' claims and PVs never reach memory. Nothing in it outlives
// the run but the claim and PV informers when they are Base.Shared's; the
// handlers the run adds to those are removed when it stops.
type Incarnation struct {
	Log      logtree.LeveledLogger
	Hostname string
	Recorder record.EventRecorder
	// Cluster makes informers of cluster-wide objects; Claims is its PVC
	// informer. Node makes informers of this node's objects; Volumes is
	// its PV informer.
	Cluster, Node   informers.SharedInformerFactory
	Claims, Volumes cache.SharedIndexInformer

	stopInformers func()
	stopEvents    func()
	// shared are Claims and Volumes when they are Base.Shared's.
	shared []*handlers
}

// Begin sets up an incarnation: it looks up the node's hostname label,
// starts the Event recorder and builds (does not start) the informers.
// The caller adds its handlers and any further informers, then calls Sync,
// and calls Stop when the run ends, whatever happened.
func (b *Base) Begin(ctx context.Context) (*Incarnation, error) {
	inc := &Incarnation{Log: supervisor.Logger(ctx), stopInformers: func() {}, stopEvents: func() {}}
	var err error
	if inc.Hostname, err = ownership.NodeHostname(ctx, b.Client, b.NodeName, inc.Log); err != nil {
		return nil, err
	}
	inc.Recorder, inc.stopEvents = NewRecorder(ctx, b.EventClient, b.Driver, b.NodeName)
	inc.Cluster = informers.NewSharedInformerFactoryWithOptions(b.Client, b.Resync,
		informers.WithTransform(ownership.StripManagedFields))
	inc.Node = b.NodeInformers()
	if b.Shared != nil {
		claims, volumes := &handlers{SharedIndexInformer: b.Shared.claims}, &handlers{SharedIndexInformer: b.Shared.volumes}
		inc.Claims, inc.Volumes, inc.shared = claims, volumes, []*handlers{claims, volumes}
		return inc, nil
	}
	if inc.Claims, err = claimInformer(inc.Cluster, *b); err != nil {
		inc.Stop()
		return nil, err
	}
	inc.Volumes = inc.Node.Core().V1().PersistentVolumes().Informer()
	return inc, nil
}

// NodeInformers makes informers of this node's objects: those labelled
// with ownership.LabelNode for this node, selected on the server so that
// other nodes' objects never reach memory.
func (b *Base) NodeInformers() informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(b.Client, b.Resync,
		informers.WithTransform(ownership.StripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{ownership.LabelNode: ownership.NodeLabelValue(b.NodeName)}.String()
		}))
}

// Sync starts every informer made from the factories and waits until
// their caches are filled. Informers run with their own context, which
// Stop cancels before waiting for them.
func (inc *Incarnation) Sync(ctx context.Context) error {
	stop, err := StartInformers(ctx, inc.Cluster, inc.Node)
	inc.stopInformers = stop
	if err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), func() bool {
		for _, h := range inc.shared {
			if !h.synced() {
				return false
			}
		}
		return true
	}) {
		return fmt.Errorf("syncing the shared informers: %w", ctx.Err())
	}
	return nil
}

// Stop ends the incarnation: its informers are stopped and waited for, its
// handlers removed from the shared ones, and the Event recorder stops.
func (inc *Incarnation) Stop() {
	inc.stopInformers()
	for _, h := range inc.shared {
		if err := h.removeAll(); err != nil {
			inc.Log.Warningf("removing event handlers: %v", err)
		}
	}
	inc.stopEvents()
}
