// Package resizer grows the volumes of this node when their claims ask for
// more storage: the controller half of volume expansion, which for
// node-local volumes is all of it.
//
// It runs as one supervised runnable per node, beside the provisioner, and
// acts on bound claims of our driver whose PV this node provisioned. It
// speaks the claim status protocol of external-resizer with recovery from
// expansion failure (see plan.go), grows the volume through the volume
// layer, then records the new size in the PV and in the claim. Everything
// happens on the node, so the new size is visible inside a running pod as
// soon as the volume layer returns: a filesystem volume's project quota is
// raised, a block volume's image is grown and fully allocated and the
// loop devices serving it re-read its size. Nothing waits for the kubelet.
//
// Crash safety comes from the order of the steps and from their
// idempotency: the claim records the target size (allocatedResources)
// before the volume grows, the volume layer's Expand is idempotent and
// crash-safe, the PV is updated before the claim's capacity, and a resize
// found in progress is finished at its recorded size. A crash at any point
// thus converges on exactly the size once promised, never smaller, and
// never allocates twice.
package resizer

import (
	"context"
	"errors"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/volume"
)

// Event reasons. They are the ones external-resizer uses, so dashboards and
// alerts written for it keep working; part of the user interface, never
// changed once released.
const (
	ReasonResizing      = "Resizing"
	ReasonResizeSuccess = "VolumeResizeSuccessful"
	ReasonResizeFailed  = "VolumeResizeFailed"
)

// Defaults for the Config's optional fields.
const (
	DefaultWorkers   = 8
	DefaultResync    = 10 * time.Minute
	defaultRetryBase = 250 * time.Millisecond
	defaultRetryMax  = 5 * time.Minute
)

// Volumes is the part of the volume manager (*volume.Manager) the resizer
// uses. Expand is idempotent and crash-safe, never shrinks a volume, and
// makes the new size visible to published block volumes' loop devices.
type Volumes interface {
	Expand(ctx context.Context, id string, bytes int64) (volume.Info, error)
}

// Config is what a Controller needs. Client, Driver, NodeName and Volumes
// are required; zero values of the other fields mean their defaults.
type Config struct {
	// Client is used for informers and all writes.
	Client kubernetes.Interface
	// EventClient sends Events, with its own rate limiter. Defaults to
	// Client.
	EventClient kubernetes.Interface
	// Driver is the CSI driver name.
	Driver string
	// NodeName is this node's Node object name.
	NodeName string
	// Volumes grows volumes on this node's data directory.
	Volumes Volumes
	// Workers is the number of claims resized concurrently.
	Workers int
	// Resync is the informer resync period.
	Resync time.Duration
	// RetryBase and RetryMax bound the per-claim exponential backoff of
	// transient failures.
	RetryBase, RetryMax time.Duration
	// Clock is for tests; defaults to the real clock.
	Clock clock.WithTicker
}

// Controller is the resizer runnable: build it with New, then pass Run to
// the supervisor. Run builds its informers and queue afresh, so a restart
// by the supervisor starts from a clean slate.
type Controller struct {
	Config
}

// New checks cfg and fills in its defaults, so a wiring mistake fails when
// the node starts rather than as a runnable the supervisor restarts forever.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("creating resizer: no Kubernetes client")
	case cfg.Driver == "":
		return nil, errors.New("creating resizer: no driver name")
	case cfg.NodeName == "":
		return nil, errors.New("creating resizer: no node name")
	case cfg.Volumes == nil:
		return nil, errors.New("creating resizer: no volume manager")
	}
	cfg.EventClient = controller.OrDefault(cfg.EventClient, cfg.Client)
	cfg.Workers = controller.OrDefault(cfg.Workers, DefaultWorkers)
	cfg.Resync = controller.OrDefault(cfg.Resync, DefaultResync)
	cfg.RetryBase = controller.OrDefault(cfg.RetryBase, defaultRetryBase)
	cfg.RetryMax = controller.OrDefault(cfg.RetryMax, defaultRetryMax)
	cfg.Clock = controller.OrDefault[clock.WithTicker](cfg.Clock, clock.RealClock{})
	return &Controller{Config: cfg}, nil
}
