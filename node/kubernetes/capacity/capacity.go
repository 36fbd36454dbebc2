// Package capacity publishes what a node's data filesystem can still hold,
// as CSIStorageCapacity objects, so that the scheduler places a pod whose
// claim waits for its first consumer only on a node where that claim fits.
//
// One object per node and StorageClass of the driver: its topology is the
// node's kubernetes.io/hostname label (the key the PVs' node affinity and
// the CSI plugin's accessible topology use), its capacity is what a new
// claim of the class can get there, volume.Space.Available under the
// class's over-commit ratio (names.ParameterOvercommit). That is the very
// accounting the provisioner admits claims by (volume.Manager.Create), so
// the scheduler and the provisioner agree; the scheduler's view can only
// be a little old, and a claim it places on stale figures is refused by
// the provisioner with an Event and no volume. maximumVolumeSize is left
// unset: a single volume may take all of the capacity, so it would say
// nothing more.
//
// Each object is owned by the Node object: when a node leaves the cluster
// for good, the garbage collector removes its capacity with it, whether
// or not its plinth-node ever runs again (a DaemonSet pod or the
// DaemonSet as owner would outlive the node, or take every node's objects
// when one pod is replaced). A node without a Node object publishes
// nothing, as no pod can be scheduled to it anyway.
//
// Updates are coalesced and rate-limited: volume changes (signalled by the
// volume manager itself, after all of a volume's bytes are written) and
// class changes only mark the figures stale; one worker measures and
// writes them at most once per MinInterval, and only objects whose figures
// changed are written.
// Space can also change outside the driver's view (files written next to
// the volumes, thin volumes filling), so the figures are measured again
// every Poll as well.
package capacity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
)

// Defaults of the Config's optional fields.
const (
	// DefaultNamespace holds the objects when the node is given no other
	// namespace. CSIStorageCapacity objects are namespaced, but the
	// scheduler reads them from every namespace; kube-system exists in
	// every cluster, so a node outside any pod needs nothing created.
	DefaultNamespace   = "kube-system"
	DefaultMinInterval = time.Second
	DefaultPoll        = time.Minute
)

// Space is the part of the volume manager (*volume.Manager) the publisher
// uses: the state of the data filesystem the accounting starts from, and
// a signal after each change the manager makes to it.
type Space interface {
	Space(ctx context.Context) (volume.Space, error)
	Changed() <-chan struct{}
}

// Config is what a Publisher needs: the fields every controller has
// (Client, Driver and NodeName required), and Volumes.
type Config struct {
	controller.Base
	// Volumes measures this node's data filesystem.
	Volumes Space
	// Namespace holds the objects; DefaultNamespace when empty.
	Namespace string
	// MinInterval is the least time between two measurements (and rounds
	// of writes): changes within it are coalesced into one update.
	MinInterval time.Duration
	// Poll is how often the figures are measured without a change seen.
	Poll time.Duration
}

// Publisher is the capacity runnable: build it with New, then pass Run to
// the supervisor. Run builds its informers and queue afresh each time.
type Publisher struct {
	Config
}

// New checks cfg and fills in its defaults, so a wiring mistake fails when
// the node starts rather than as a runnable the supervisor restarts forever.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Complete("capacity publisher"); err != nil {
		return nil, err
	}
	if cfg.Volumes == nil {
		return nil, errors.New("creating capacity publisher: no volume manager")
	}
	if cfg.MinInterval < 0 || cfg.Poll < 0 {
		return nil, fmt.Errorf("creating capacity publisher: negative interval (min %s, poll %s)", cfg.MinInterval, cfg.Poll)
	}
	cfg.Namespace = controller.OrDefault(cfg.Namespace, DefaultNamespace)
	cfg.MinInterval = controller.OrDefault(cfg.MinInterval, DefaultMinInterval)
	cfg.Poll = controller.OrDefault(cfg.Poll, DefaultPoll)
	return &Publisher{Config: cfg}, nil
}
