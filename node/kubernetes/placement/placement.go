// Package placement places the claims of Plinth's StorageClasses that
// bind immediately. No scheduler chooses a node for such a claim (no pod
// is waiting for it), so the placer does: it picks a node from the
// CSIStorageCapacity objects the nodes publish, the class's
// allowedTopologies and the Node labels, and sets the claim's
// selected-node annotation, the way kube-scheduler does for a claim that
// waits for its first consumer. The node named then provisions the
// claim by the usual rule (ownership.OwnsClaim); one that finds it cannot
// hold the claim after all hands it back, and the placer chooses again,
// passing that node over for a while.
//
// One writer, whatever the number of nodes: each placement is one
// conditional patch, and no node hears of a claim before it is placed on
// it (nodes select their claims by label, ownership.ClaimSelector). The
// placer runs in the admission server (plinth-node admission-serve), with
// the control plane's identity; node agents may not place claims at all
// (the claims admission policy), so a compromised node cannot draw other
// claims to itself. Replicas of the server elect one placer with a Lease.
package placement

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/pkg/logtree"
)

// Event reasons on the claims the placer decides.
const (
	// ReasonPlaced: the placer put the claim on a node.
	ReasonPlaced = "PlacedOnNode"
	// ReasonNotPlaced: no node can take the claim now; the message says
	// why, and the placer tries again when the nodes' figures change.
	ReasonNotPlaced = "NotPlaced"
)

// Leader election timings, those of kube-controller-manager: a placer
// that stops renewing is replaced within LeaseDuration.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// Identity names this process in the Lease: the host and a random
// suffix, so that a restarted replica is a new candidate.
func Identity() string {
	host, _ := os.Hostname()
	return host + "_" + string(uuid.NewUUID())
}

// Config is what a Placer needs. Client, Snapshots, Driver, LeaseNamespace,
// LeaseName, Identity and Log are required.
type Config struct {
	// Client reads the cluster and patches claims.
	Client kubernetes.Interface
	// Snapshots reads the VolumeSnapshots and contents that claims are
	// restored from (placeAtSource).
	Snapshots snapclient.Interface
	// EventClient sends Events; Client when nil.
	EventClient kubernetes.Interface
	// LeaseClient renews the Lease; Client when nil. A client of its own
	// (its own rate limit) keeps the renewals from queuing behind the
	// placer's patches and Events when many claims wait.
	LeaseClient kubernetes.Interface
	// Driver is the provisioner name of the classes placed.
	Driver string
	// LeaseNamespace and LeaseName name the Lease the replicas elect the
	// placer with.
	LeaseNamespace, LeaseName string
	// Identity names this replica in the Lease.
	Identity string
	// Log is where the placer says what it does.
	Log logtree.LeveledLogger
	// Resync is the informers' resync period: each unplaced claim is
	// looked at again at least this often. controller.DefaultResync when
	// zero.
	Resync time.Duration
	// Clock is for tests; the real clock when nil.
	Clock clock.WithTicker
}

// Placer is the placement runnable: build it with New, then call Run.
type Placer struct {
	cfg Config
	// leading is held by the one lead under way: one that lost the
	// Lease may still be stopping when the next begins.
	leading sync.Mutex
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Placer, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("creating the placer: no Kubernetes client")
	case cfg.Snapshots == nil:
		return nil, errors.New("creating the placer: no snapshot API client")
	case cfg.Driver == "":
		return nil, errors.New("creating the placer: no driver name")
	case cfg.LeaseNamespace == "" || cfg.LeaseName == "":
		return nil, errors.New("creating the placer: no Lease to elect a leader with")
	case cfg.Identity == "":
		return nil, errors.New("creating the placer: no identity")
	case cfg.Log == nil:
		return nil, errors.New("creating the placer: no logger")
	}
	cfg.EventClient = controller.OrDefault(cfg.EventClient, cfg.Client)
	cfg.LeaseClient = controller.OrDefault(cfg.LeaseClient, cfg.Client)
	cfg.Resync = controller.OrDefault(cfg.Resync, controller.DefaultResync)
	cfg.Clock = controller.OrDefault[clock.WithTicker](cfg.Clock, clock.RealClock{})
	return &Placer{cfg: cfg}, nil
}

// Run places claims while this replica holds the Lease, and stands by
// while another does, until ctx ends. On the way out it gives the Lease
// up, so that a replica that stays takes over at once.
func (p *Placer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: p.cfg.LeaseNamespace, Name: p.cfg.LeaseName},
				Client:     p.cfg.LeaseClient.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: p.cfg.Identity},
			},
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true,
			Name:            p.cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: p.lead,
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("electing the placer: %w", err)
		}
		le.Run(ctx)
	}
	p.leading.Lock() // the last lead has stopped
	defer p.leading.Unlock()
	return nil
}

// lead places claims until ctx ends: the Lease is lost, or Run's ctx
// ended.
func (p *Placer) lead(ctx context.Context) {
	p.leading.Lock()
	defer p.leading.Unlock()
	p.cfg.Log.Infof("placing the claims of StorageClasses of %s that bind immediately (leader: %s)", p.cfg.Driver, p.cfg.Identity)
	for ctx.Err() == nil {
		err := p.place(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		p.cfg.Log.Warningf("placing claims (starting again in %s): %v", retryPeriod, err)
		select {
		case <-ctx.Done():
		case <-p.cfg.Clock.After(retryPeriod):
		}
	}
}
