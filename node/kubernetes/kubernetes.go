// Package kubernetes is the Kubernetes side of plinth-node: the services
// that connect to the API server. NodeService runs the controllers as its
// supervised children; HealthService watches the health of the node's
// volumes. Both are siblings of the CSI plugin (node/kubernetes/csi) under
// the node's root, and all three use the node's one volume engine, which
// the root hands them (core.Env.Volumes).
//
//	kubernetes
//	  cluster-objects   CSIDriver, default StorageClass, RBAC (then Done)
//	  provisioner       PVC -> volume + PV; released PV -> delete
//	  resizer           larger request of a bound PVC -> volume, PV, PVC grown
//	  capacity          free space per StorageClass -> CSIStorageCapacity
//	  snapshots         VolumeSnapshotContent of this node -> snapshot made, deleted
//	  node-removal      claims of a node removed for good -> Event; released PVs deleted
//	volume-health       the volumes' health, asked of the CSI plugin -> Events; the quota audit
//
// Each service builds its clients once per start (Options.connect): a
// clientset is only a connection pool and rate limiter, safe to share
// among a service's children and cheap to keep. The claim and PV
// informers of the controllers are shared too: the kubernetes service
// builds one of each for the process (controller.Shared), so that a claim
// change reaches this node once, not once per controller; they outlive a
// controller's restart and stay current through their watches. Queues,
// Event recorders and every other informer are built by each controller
// inside its Run, so a controller restarted by the supervisor starts from
// a fresh queue.
package kubernetes

import (
	"context"
	"fmt"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/snapshotapi"
	"source.plinth.dev/pkg/logtree"
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

// Clients are the API clients a service shares with its children.
type Clients struct {
	// Client is for informers and writes.
	Client kubernetes.Interface
	// Events has its own rate limiter, for Events only.
	Events kubernetes.Interface
	// Snapshots is the client of the snapshot API (snapshot.storage.k8s.io),
	// with Client's rate limits.
	Snapshots snapclient.Interface
}

// Options are the node's Kubernetes settings, shared by NodeService and
// HealthService. plinth-node binds its flags to these fields and passes
// the struct down whole.
type Options struct {
	// Kubeconfig is the path of the kubeconfig to use; empty means the
	// in-cluster configuration (the pod's service account).
	Kubeconfig string
	// QPS and Burst are the client rate limits; zero means the defaults.
	QPS   float64
	Burst int
	// OrphanGracePeriod is the provisioner's (zero: its default).
	OrphanGracePeriod time.Duration
	// OrphanRetention is how long the provisioner keeps a volume in
	// quarantine (zero: its default).
	OrphanRetention time.Duration
	// CapacityNamespace holds the node's CSIStorageCapacity objects
	// (empty: capacity.DefaultNamespace).
	CapacityNamespace string
	// RemovedNodeGracePeriod is the node-removal controller's (zero: its
	// default).
	RemovedNodeGracePeriod time.Duration
	// VolumeHealthInterval is how often every bound volume is checked, and
	// VolumeAuditInterval how often every filesystem volume is walked for
	// files moved out of its project quota (zero: volumehealth's defaults).
	VolumeHealthInterval time.Duration
	VolumeAuditInterval  time.Duration
	// TestOnlyNoOrphanRemoval is for tests only (see provisioner.Config).
	TestOnlyNoOrphanRemoval bool
	// Metrics, if set, receives the controllers' counts (nil: none).
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

// RESTConfig loads the client configuration of node nodeName, with the
// rate limits of o.
func (o *Options) RESTConfig(nodeName string) (*rest.Config, error) {
	cfg, err := ClientConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = float32(o.QPS)
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultQPS
	}
	cfg.Burst = o.Burst
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	// Protobuf instead of JSON: less CPU and garbage per object decoded,
	// which on a big cluster is most of what the node agent does.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = fmt.Sprintf("plinth-node/%s (%s)", nodeName, names.DriverName)
	return cfg, nil
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
	snapshots, err := snapshotapi.NewClient(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Client: client, Events: events, Snapshots: snapshots}, nil
}

// connect builds the clients of one start of a service of node nodeName,
// and returns the configuration they were built from.
func (o *Options) connect(nodeName string) (Clients, *rest.Config, error) {
	cfg, err := o.RESTConfig(nodeName)
	if err != nil {
		return Clients{}, nil, err
	}
	clients, err := NewClients(cfg)
	if err != nil {
		return Clients{}, nil, err
	}
	return clients, cfg, nil
}

// base is what every controller of the node is built from: the clients,
// this node's name and o's metrics.
func (o *Options) base(clients Clients, nodeName string) controller.Base {
	return controller.Base{
		Client:      clients.Client,
		EventClient: clients.Events,
		Driver:      names.DriverName,
		NodeName:    nodeName,
		Metrics:     o.Metrics,
	}
}

// checkIdentity makes sure the admission policies hold this node agent to
// its node. In the cluster (a DaemonSet pod) it refuses to run as anything
// else (clusterobjects.CheckDaemonSetIdentity); with a kubeconfig, which an
// operator or a test may point at any identity, it warns.
func (o *Options) checkIdentity(ctx context.Context, c kubernetes.Interface, nodeName string, log logtree.LeveledLogger) error {
	id, err := clusterobjects.WhoAmI(ctx, c)
	if o.Kubeconfig == "" {
		if err != nil {
			return err
		}
		return clusterobjects.CheckDaemonSetIdentity(id, nodeName)
	}
	switch {
	case err != nil:
		log.Warningf("cannot tell whether the admission policies restrict this node agent: %v", err)
	case !id.Restricted:
		log.Warningf("plinth-node authenticates as %s, which the admission policies do not restrict: RBAC alone limits what it writes", id.User)
	case id.Node != nodeName:
		log.Warningf("plinth-node serves node %s but authenticates as %s, which the admission policies hold to node %q: they refuse its writes on this node's claims, volumes and capacity",
			nodeName, id.User, id.Node)
	}
	return nil
}
