// Package noderemoval gives the claims of a node that left the cluster a
// clear outcome. A Plinth volume lives on one machine; when that machine's
// Node object is deleted for good (the machine was decommissioned or
// replaced), its claims stay bound to PVs that can never be served, and
// their pods stay Pending with only the scheduler's terse "volume node
// affinity conflict" to go on.
//
// One surviving plinth-node (see actor.go) notices, once the Node has been
// gone for a grace period, and then:
//   - sends a Warning Event NodeRemoved on every claim still bound to a
//     volume of that node (and on the PV), saying that the data is on that
//     machine only, and what the operator can do: bring the node back under
//     the same name, or delete the pods and the claim to start over;
//   - deletes the PV objects of that node that are Released with reclaim
//     policy Delete, which no plinth-node would ever delete otherwise (their
//     node is gone). Their data, if the machine ever returns, is removed by
//     that node's own orphan reconciler; Retain PVs are kept.
//
// What it costs. Every node keeps an informer of CSINodes (one small
// object per node, changed only when a driver registers). Only the ten
// lowest-named nodes running the driver take part in choosing the actor,
// each reading the Nodes of the lower-named of them until one is Ready (on
// a healthy cluster, one GET a look); the others read nothing. The actor
// does not look at every PV: a node's CSINode is deleted with its Node
// (the garbage collector follows the CSINode's owner reference), so
// CSINode deletions name the nodes that may be gone (suspects, see
// suspects.go). Each look, the actor GETs each suspect's Node and, once
// one has been missing for the grace period, lists only the PVs labelled
// with that node, until they are settled or the node returns. Nodes
// removed while no plinth-node watched are found once per actor term: on
// becoming the actor, a node lists the Plinth PVs once, in pages, and
// suspects the nodes they name that have no CSINode.
package noderemoval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// ReasonNodeRemoved is the Event reason on claims (and PVs) of a removed
// node; part of the user interface.
const ReasonNodeRemoved = "NodeRemoved"

// Defaults of Config's optional fields. A Node object can vanish briefly
// (an operator deleting it to re-register the kubelet); five minutes
// without it is taken as for good.
const (
	DefaultGracePeriod = 5 * time.Minute
	DefaultInterval    = time.Minute
)

// Config is what a Controller needs: the fields every controller has
// (Client, Driver and NodeName required), and its timings.
type Config struct {
	controller.Base
	// GracePeriod is how long a node's Node object must be missing before
	// the node counts as removed.
	GracePeriod time.Duration
	// Interval is the time between two looks: the choice of the actor,
	// and the actor's look at its suspects.
	Interval time.Duration
}

// Controller is the node-removal runnable: build it with New, then pass
// Run to the supervisor.
type Controller struct {
	Config
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Complete("node-removal controller"); err != nil {
		return nil, err
	}
	cfg.GracePeriod = controller.OrDefault(cfg.GracePeriod, DefaultGracePeriod)
	cfg.Interval = controller.OrDefault(cfg.Interval, DefaultInterval)
	if cfg.Interval <= 0 || cfg.GracePeriod <= 0 {
		return nil, errors.New("creating node-removal controller: grace period and interval must be positive")
	}
	return &Controller{Config: cfg}, nil
}

// Run watches CSINodes and, while this node is the actor, looks at the
// suspects every Interval, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, c.Resync,
		informers.WithTransform(ownership.StripManagedFields))
	csiNodes := factory.Storage().V1().CSINodes()
	recorder, stopEvents := controller.NewRecorder(ctx, c.EventClient, c.Driver, c.NodeName)
	defer stopEvents()
	s := &sweep{Controller: c, log: log, recorder: recorder, csiNodes: csiNodes.Lister(),
		suspects: newSuspects(c.NodeName), announced: map[types.UID]string{}}
	// Registered before Start, so that no deletion is missed.
	if _, err := csiNodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: s.suspects.csiNodeDeleted}); err != nil {
		return fmt.Errorf("watching CSINodes: %w", err)
	}
	stop, err := controller.StartInformers(ctx, factory)
	defer stop()
	if err != nil {
		return err
	}
	looks := controller.Every(c.Clock, c.Interval, func(ctx context.Context) {
		if err := s.run(ctx); err != nil && ctx.Err() == nil {
			log.Warningf("looking for removed nodes: %v", err)
		}
	})
	return controller.Loops{Tasks: []func(context.Context){looks}}.Run(ctx)
}

// sweep is the state of one Run.
type sweep struct {
	*Controller
	log      logtree.LeveledLogger
	recorder record.EventRecorder
	csiNodes storagelisters.CSINodeLister
	suspects *suspects
	// acting is whether this node was the actor at the last look: a node
	// that becomes the actor looks for nodes removed while it was not.
	acting bool
	// announced are the PVs whose claims got their Event in this run, with
	// their node's name, so that they are forgotten with their suspect.
	announced map[types.UID]string
}

// run is one look: if this node is the actor, it looks at each suspect,
// and settles the volumes of those whose Node has been missing for the
// grace period. A node that is not the actor forgets its suspects: if it
// becomes the actor, it finds them again.
func (s *sweep) run(ctx context.Context) error {
	acting, err := s.isActor(ctx)
	if err != nil {
		return err
	}
	if !acting {
		if s.acting {
			s.log.Infof("another node acts for removed nodes now")
		}
		s.acting = false
		s.suspects.clear()
		return nil
	}
	if !s.acting {
		if err := s.discover(ctx); err != nil {
			return err
		}
		s.acting = true
	}
	now := s.Clock.Now()
	var errs []error
	for _, node := range s.suspects.names() {
		done, err := s.look(ctx, node, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if done {
			s.suspects.drop(node)
			for uid, n := range s.announced {
				if n == node {
					delete(s.announced, uid)
				}
			}
		}
	}
	return errors.Join(errs...)
}
