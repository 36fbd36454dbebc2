// Package kubernetes is the Kubernetes side of plinth-node: one runnable
// that connects to the API server and starts the controllers that need it
// as its supervised children.
//
//	kubernetes
//	  cluster-objects   CSIDriver, default StorageClass, RBAC (then Done)
//	  provisioner       PVC -> volume + PV; released PV -> delete
//	  resizer           larger request of a bound PVC -> volume, PV, PVC grown
//	  capacity          free space per StorageClass -> CSIStorageCapacity
//	  node-removal      claims of a node removed for good -> Event; released PVs deleted
//	  <extra>...        further children given the same clients; plinth-node
//	                    adds the CSI plugin (csi), which runs its server and
//	                    the volume health monitor (VolumeHealth)
//
// The clientset is built once here and shared: it is only a connection pool
// and rate limiter, safe to share and cheap to keep. The claim and PV
// informers are shared too: Run builds one of each for the process
// (controller.Shared), so that a claim change reaches this node once, not
// once per controller; they outlive a controller's restart and stay
// current through their watches. Queues, Event recorders and every other
// informer are built by each controller inside its Run, so a controller
// restarted by the supervisor starts from a fresh queue.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/noderemoval"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/node/kubernetes/resizer"
	"source.plinth.dev/node/kubernetes/volumehealth"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Client rate limits. client-go's defaults (5 QPS, burst 10) would cap
// provisioning at a few volumes a second, far below what the API server
// and the disk can do; these are well above that and still polite to a
// shared control plane. Events get a separate, smaller budget so a burst of
// Events never slows provisioning.
const (
	DefaultQPS        = 100
	DefaultBurst      = 200
	DefaultEventQPS   = 20
	DefaultEventBurst = 50
)

// Clients are the API clients the Service shares with its children.
type Clients struct {
	// Client is for informers and writes.
	Client kubernetes.Interface
	// Events has its own rate limiter, for Events only.
	Events kubernetes.Interface
}

// Child builds one further runnable of the Service from its clients.
type Child func(Clients) supervisor.Runnable

// Service is the Kubernetes runnable of a node.
type Service struct {
	// Kubeconfig is the path of the kubeconfig to use; empty means the
	// in-cluster configuration.
	Kubeconfig string
	// QPS and Burst are the client rate limits; zero means the defaults.
	QPS   float32
	Burst int
	// NodeName is this node's name.
	NodeName string
	// Volumes is the node's volume manager, shared by all children that
	// touch volumes (there must be exactly one per data directory: its
	// per-volume locks only work within one Manager).
	Volumes *volume.Manager
	// OrphanGracePeriod is passed to the provisioner; zero means its default.
	OrphanGracePeriod time.Duration
	// CapacityNamespace is passed to the capacity publisher; empty means
	// its default.
	CapacityNamespace string
	// TestOnlyNoOrphanRemoval is passed to the provisioner: only tests set
	// it (see provisioner.Config).
	TestOnlyNoOrphanRemoval bool
	// RemovedNodeGracePeriod is passed to the node-removal controller;
	// zero means its default.
	RemovedNodeGracePeriod time.Duration
	// Extra are further children (the CSI plugin) started with
	// the same clients.
	Extra map[string]Child
	// Metrics, if set, receives the controllers' counts and reports on
	// Volumes while the Service runs.
	Metrics *metrics.Metrics
}

// ClientConfig loads the client configuration of kubeconfig, or the pod's
// service account when kubeconfig is "" (in the cluster).
func ClientConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	return cfg, nil
}

// RESTConfig loads the client configuration with the Service's rate limits.
func (s *Service) RESTConfig() (*rest.Config, error) {
	cfg, err := ClientConfig(s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = s.QPS
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultQPS
	}
	cfg.Burst = s.Burst
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	// Protobuf instead of JSON: less CPU and garbage per object decoded,
	// which on a big cluster is most of what the node agent does.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = fmt.Sprintf("plinth-node/%s (%s)", s.NodeName, names.DriverName)
	return cfg, nil
}

// checkIdentity makes sure the admission policies hold this node agent to
// its node. In the cluster (a DaemonSet pod) it refuses to run as anything
// else (clusterobjects.CheckDaemonSetIdentity); with a kubeconfig, which an
// operator or a test may point at any identity, it warns.
func (s *Service) checkIdentity(ctx context.Context, c kubernetes.Interface, log logtree.LeveledLogger) error {
	id, err := clusterobjects.WhoAmI(ctx, c)
	if s.Kubeconfig == "" {
		if err != nil {
			return err
		}
		return clusterobjects.CheckDaemonSetIdentity(id, s.NodeName)
	}
	switch {
	case err != nil:
		log.Warningf("cannot tell whether the admission policies restrict this node agent: %v", err)
	case !id.Restricted:
		log.Warningf("plinth-node authenticates as %s, which the admission policies do not restrict: RBAC alone limits what it writes", id.User)
	case id.Node != s.NodeName:
		log.Warningf("plinth-node serves node %s but authenticates as %s, which the admission policies hold to node %q: they refuse its writes on this node's claims, volumes and capacity",
			s.NodeName, id.User, id.Node)
	}
	return nil
}

// NewClients builds the shared clients from cfg.
func NewClients(cfg *rest.Config) (Clients, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("building Kubernetes client: %w", err)
	}
	ecfg := rest.CopyConfig(cfg)
	ecfg.QPS, ecfg.Burst = DefaultEventQPS, DefaultEventBurst
	events, err := kubernetes.NewForConfig(ecfg)
	if err != nil {
		return Clients{}, fmt.Errorf("building Kubernetes event client: %w", err)
	}
	return Clients{Client: client, Events: events}, nil
}

// Run connects to the API server, starts the children and runs until ctx
// ends.
func (s *Service) Run(ctx context.Context) error {
	if s.NodeName == "" || s.Volumes == nil {
		return errors.New("kubernetes service: NodeName and Volumes are required")
	}
	cfg, err := s.RESTConfig()
	if err != nil {
		return err
	}
	clients, err := NewClients(cfg)
	if err != nil {
		return err
	}
	log := supervisor.Logger(ctx)
	if err := s.checkIdentity(ctx, clients.Client, log); err != nil {
		return err
	}
	// Settle what a crash interrupted (half-made or half-deleted volumes)
	// before any controller looks at the volumes directory.
	recs, err := s.Volumes.Recover(ctx)
	for _, r := range recs {
		if r.Err != nil {
			log.Warningf("recovering volume %s: %s failed: %v", r.ID, r.Action, r.Err)
		} else {
			log.Infof("recovered volume %s: %s", r.ID, r.Action)
		}
	}
	if err != nil {
		return err
	}
	unwatch, err := s.Metrics.WatchVolumes(s.Volumes)
	if err != nil {
		return err
	}
	defer unwatch()
	base := controller.Base{
		Client:      clients.Client,
		EventClient: clients.Events,
		Driver:      names.DriverName,
		NodeName:    s.NodeName,
		Metrics:     s.Metrics,
	}
	// One claim informer and one PV informer for the whole process: each
	// claim change in the cluster then reaches this node once, not once
	// per controller.
	if base.Shared, err = controller.NewShared(base); err != nil {
		return err
	}
	sharedCtx, stopShared := context.WithCancel(ctx)
	var shared sync.WaitGroup
	shared.Go(func() { base.Shared.Run(sharedCtx) })
	defer func() {
		stopShared()
		shared.Wait()
	}()
	prov, err := provisioner.New(provisioner.Config{
		Base:                    base,
		Volumes:                 s.Volumes,
		OrphanGracePeriod:       s.OrphanGracePeriod,
		TestOnlyNoOrphanRemoval: s.TestOnlyNoOrphanRemoval,
	})
	if err != nil {
		return err
	}
	resize, err := resizer.New(resizer.Config{Base: base, Volumes: s.Volumes})
	if err != nil {
		return err
	}
	removal, err := noderemoval.New(noderemoval.Config{Base: base, GracePeriod: s.RemovedNodeGracePeriod})
	if err != nil {
		return err
	}
	publisher, err := capacity.New(capacity.Config{Base: base, Volumes: s.Volumes, Namespace: s.CapacityNamespace})
	if err != nil {
		return err
	}
	children := map[string]supervisor.Runnable{
		"cluster-objects": func(ctx context.Context) error {
			// Failing here (API server not up yet, no rights) is retried by
			// the supervisor with backoff; provisioning does not wait for
			// it, since claims of an existing class can be served anyway.
			if err := clusterobjects.Ensure(ctx, clients.Client, supervisor.Logger(ctx)); err != nil {
				return err
			}
			supervisor.Signal(ctx, supervisor.SignalDone)
			return nil
		},
		"provisioner":  prov.Run,
		"resizer":      resize.Run,
		"capacity":     publisher.Run,
		"node-removal": removal.Run,
	}
	for name, child := range s.Extra {
		if _, taken := children[name]; taken {
			return fmt.Errorf("kubernetes service: child name %q is taken", name)
		}
		children[name] = child(clients)
	}
	if err := supervisor.RunGroup(ctx, children); err != nil {
		return fmt.Errorf("starting Kubernetes children: %w", err)
	}
	log.Infof("connected to %s as node %s (QPS %v, burst %d)", cfg.Host, s.NodeName, cfg.QPS, cfg.Burst)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// Health is what VolumeHealth needs besides the clients.
type Health struct {
	NodeName string
	// Checker checks a volume (the CSI plugin, volumehealth.CSI), every
	// Interval (zero: the default).
	Checker  volumehealth.Checker
	Interval time.Duration
	// Auditor puts files moved out of a volume's project quota back in
	// (the volume manager), every AuditInterval (zero: the default).
	Auditor       volumehealth.Auditor
	AuditInterval time.Duration
	// Metrics receives the count of abnormal volumes and the audit's
	// figures (nil: none).
	Metrics *metrics.Metrics
}

// VolumeHealth builds the runnable that watches the health of this node's
// volumes and reports changes as Events on their claims and PVs, and that
// puts files moved out of a volume's project quota back in (see Health).
func VolumeHealth(c Clients, h Health) (supervisor.Runnable, error) {
	m, err := volumehealth.New(volumehealth.Config{
		Base: controller.Base{
			Client:      c.Client,
			EventClient: c.Events,
			Driver:      names.DriverName,
			NodeName:    h.NodeName,
			Metrics:     h.Metrics,
		},
		Checker:       h.Checker,
		Interval:      h.Interval,
		Auditor:       h.Auditor,
		AuditInterval: h.AuditInterval,
	})
	if err != nil {
		return nil, err
	}
	return m.Run, nil
}
