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

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
)

// Event reasons. They are the ones external-resizer uses, so dashboards and
// alerts written for it keep working; part of the user interface, never
// changed once released.
const (
	ReasonResizing      = "Resizing"
	ReasonResizeSuccess = "VolumeResizeSuccessful"
	ReasonResizeFailed  = "VolumeResizeFailed"
)

// DefaultWorkers is the default of Config.Workers.
const DefaultWorkers = 8

// Volumes is the part of the volume manager (*volume.Manager) the resizer
// uses. Expand is idempotent and crash-safe, never shrinks a volume, and
// makes the new size visible to published block volumes' loop devices.
// Space, Changed and UnenforcedCapacity tell when a resize that did not
// fit may fit now.
type Volumes interface {
	Expand(ctx context.Context, id string, bytes int64) (volume.Info, error)
	Space(ctx context.Context) (volume.Space, error)
	Changed() <-chan struct{}
	UnenforcedCapacity() (reason error, allowed bool)
}

// Config is what a Controller needs: the fields every controller has
// (Client, Driver and NodeName required), and Volumes.
type Config struct {
	controller.Base
	// Volumes grows volumes on this node's data directory.
	Volumes Volumes
	// Workers is the number of claims resized concurrently.
	Workers int
}

// Controller is the resizer runnable: build it with New, then pass Run to
// the supervisor. Run builds its queue and handlers afresh, so a restart
// by the supervisor starts from a fresh queue; its claim and PV informers
// are the process's shared ones when Base.Shared is set
// (controller.Shared), which outlive the restart and stay current through
// their watches.
type Controller struct {
	Config
}

// New checks cfg and fills in its defaults, so a wiring mistake fails when
// the node starts rather than as a runnable the supervisor restarts forever.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Complete("resizer"); err != nil {
		return nil, err
	}
	if cfg.Volumes == nil {
		return nil, errors.New("creating resizer: no volume manager")
	}
	cfg.Workers = controller.OrDefault(cfg.Workers, DefaultWorkers)
	return &Controller{Config: cfg}, nil
}
