// Package noderemoval gives the claims of a node that left the cluster a
// clear outcome. A Plinth volume lives on one machine; when that machine's
// Node object is deleted for good (the machine was decommissioned or
// replaced), its claims stay bound to PVs that can never be served, and
// their pods stay Pending with only the scheduler's terse "volume node
// affinity conflict" to go on.
//
// One surviving plinth-node notices, once the Node has been
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
// Which plinth-node acts (see actor.go): the lowest-named Ready one among
// the ten lowest-named nodes whose CSINode lists the driver (itself
// counted), so that the cluster gets one Event per claim, not one per
// node. Each node keeps an informer of CSINodes (small objects that change
// only when a driver registers); only those ten read Nodes, those of lower
// names until one is Ready; only the actor lists PVs, at an interval.
package noderemoval

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	storagelisters "k8s.io/client-go/listers/storage/v1"
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
	// Interval is the time between two looks, by the actor, at the PVs.
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

// Run watches CSINodes and, while this node is the actor, looks for
// removed nodes every Interval, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, c.Resync,
		informers.WithTransform(ownership.StripManagedFields))
	csiNodes := factory.Storage().V1().CSINodes()
	csiNodes.Informer() // registered before Start
	recorder, stopEvents := controller.NewRecorder(ctx, c.EventClient, c.Driver, c.NodeName)
	defer stopEvents()
	stop, err := controller.StartInformers(ctx, factory)
	defer stop()
	if err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	s := &sweep{Controller: c, log: log, recorder: recorder, csiNodes: csiNodes.Lister(),
		missingSince: map[string]time.Time{}, announced: map[types.UID]bool{}}
	return controller.Every(ctx, c.Clock, c.Interval, func(ctx context.Context) {
		if err := s.run(ctx); err != nil && ctx.Err() == nil {
			log.Warningf("looking for removed nodes: %v", err)
		}
	})
}

// sweep is the state of one Run.
type sweep struct {
	*Controller
	log      logtree.LeveledLogger
	recorder record.EventRecorder
	csiNodes storagelisters.CSINodeLister
	// missingSince is when each node with volumes was first seen without
	// its Node object.
	missingSince map[string]time.Time
	// announced are the PVs whose claims got their Event in this run.
	announced map[types.UID]bool
}

// run is one look: if this node is the actor, it finds the nodes of our
// PVs whose Node objects are gone and settles the claims of those gone for
// longer than the grace period.
func (s *sweep) run(ctx context.Context) error {
	acting, err := s.isActor(ctx)
	if err != nil {
		return err
	}
	if !acting {
		clear(s.missingSince)
		return nil
	}
	pvs, err := s.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: ownership.LabelNode})
	if err != nil {
		return fmt.Errorf("listing PVs: %w", err)
	}
	byNode := map[string][]*corev1.PersistentVolume{}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != s.Driver {
			continue
		}
		// This node is alive whatever the API says of its Node object
		// (a kubelet that has not registered yet, a node run without
		// one): it never settles its own volumes as a removed node's.
		if node := nodeOf(pv); node != "" && node != s.NodeName {
			byNode[node] = append(byNode[node], pv)
		}
	}
	now := s.Clock.Now()
	for node, vols := range byNode {
		removed, err := s.removedFor(ctx, node, now)
		if err != nil {
			return err
		}
		if removed {
			s.settle(ctx, node, vols)
		}
	}
	for node := range s.missingSince {
		if _, ok := byNode[node]; !ok {
			delete(s.missingSince, node)
		}
	}
	return nil
}

// nodeOf is the name of the node a PV of ours lives on, from its node
// label; "" when the label is a hash of a long name, which cannot be
// looked up (such a node's claims get no outcome from here).
func nodeOf(pv *corev1.PersistentVolume) string {
	name, _ := ownership.NodeNameOfLabel(pv.Labels[ownership.LabelNode])
	return name
}

// removedFor says whether node's Node object has been missing for the
// grace period.
func (s *sweep) removedFor(ctx context.Context, node string, now time.Time) (bool, error) {
	_, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case err == nil:
		delete(s.missingSince, node)
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("looking up node %s: %w", node, err)
	}
	since, ok := s.missingSince[node]
	if !ok {
		s.missingSince[node] = now
		s.log.Infof("node %s, which has Plinth volumes, has no Node object; it counts as removed after %s", node, s.GracePeriod)
		return false, nil
	}
	return now.Sub(since) >= s.GracePeriod, nil
}

// settle gives the volumes of removed node their outcome.
func (s *sweep) settle(ctx context.Context, node string, vols []*corev1.PersistentVolume) {
	for _, pv := range vols {
		switch {
		case pv.Status.Phase == corev1.VolumeBound && pv.Spec.ClaimRef != nil:
			if s.announced[pv.UID] {
				continue
			}
			s.announced[pv.UID] = true
			s.log.Warningf("claim %s/%s is bound to volume %s of removed node %s", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, pv.Name, node)
			msg := fmt.Sprintf("node %s was removed from the cluster, and volume %s lives on it only: pods using this claim cannot run elsewhere. "+
				"If the machine returns under the same name, the claim works again with its data. Otherwise delete the pods and this claim, "+
				"and create a new claim: the data of this one is lost with the machine", node, pv.Name)
			s.recorder.Event(pv.Spec.ClaimRef, corev1.EventTypeWarning, ReasonNodeRemoved, msg)
			s.recorder.Event(pv, corev1.EventTypeWarning, ReasonNodeRemoved, msg)
		case pv.Status.Phase == corev1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete:
			// Preconditions: only this PV, as it was when listed.
			err := s.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &pv.UID, ResourceVersion: &pv.ResourceVersion},
			})
			if err != nil && !apierrors.IsNotFound(err) {
				s.log.Warningf("deleting released PV %s of removed node %s: %v", pv.Name, node, err)
				continue
			}
			s.log.Infof("deleted released PV %s of removed node %s (its data stays on that machine until its plinth-node removes it as an orphan)", pv.Name, node)
			s.recorder.Eventf(pv, corev1.EventTypeNormal, ReasonNodeRemoved,
				"deleted: released, reclaim policy Delete, and its node %s was removed from the cluster", node)
		}
	}
}
