package provisioner

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// Claims of a class with volumeBindingMode Immediate are provisioned
// before any pod uses them, so no scheduler picks their node. Every node
// running the driver sees such a claim; each one whose labels the class's
// allowedTopologies admit and whose data filesystem can hold the claim
// offers itself by setting the selected-node annotation, the way the
// scheduler would, in a patch conditional on the resourceVersion it saw.
// The API server lets exactly one such patch through: the winner then owns
// the claim by the usual rule (ownership.OwnsClaim) and provisions it, and
// the others see the annotation and let it be. A node waits a delay derived
// from the claim's UID and its own name before offering, so that usually
// one node offers first and the others find the claim taken instead of
// losing a write. The admission webhook holds a node's placement to the
// same rule (ownership.BindsImmediately, ownership.TopologyAdmits), so a
// node cannot take a claim of any other class.

// ReasonPlaced is the Event reason on a claim of an Immediate class when
// this node took it.
const ReasonPlaced = "PlacedOnNode"

// maxPlacementDelay bounds the delay before a node offers itself for an
// unplaced claim.
const maxPlacementDelay = time.Second

// placementDelay is this node's delay before it offers itself for the
// claim with uid: spread over [0, maxPlacementDelay) by a hash of both, so
// the order of nodes differs from claim to claim.
func placementDelay(uid types.UID, node string) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	return time.Duration(h.Sum64() % uint64(maxPlacementDelay))
}

// syncPlacement offers this node for an unplaced claim of an Immediate
// class (see the comment at the top of this file). It returns nil when the
// claim is not this node's to take: another class mode, a topology or a
// size this node cannot serve, or another node was faster.
func (r *run) syncPlacement(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil
	}
	class, err := r.classes.Get(*pvc.Spec.StorageClassName)
	if apierrors.IsNotFound(err) {
		return nil // onClass requeues the claim once the class exists
	} else if err != nil {
		return fmt.Errorf("reading StorageClass %q: %w", *pvc.Spec.StorageClassName, err)
	}
	if class.Provisioner != r.Driver || !ownership.BindsImmediately(class) {
		return nil
	}
	// A claim no node can serve as it is (validateClaim depends on the
	// claim and its class alone) is placed all the same, by the same
	// race: the one node that wins it then says why in a
	// ProvisioningFailed Event, as for any claim placed on it, where
	// otherwise every node would keep silent, or every node say it.
	req, invalid := validateClaim(pvc, class, r.Driver)
	if wait := placementDelay(pvc.UID, r.NodeName) - r.clock.Since(pvc.CreationTimestamp.Time); wait > 0 {
		r.claimQ.AddAfter(key, wait)
		return nil
	}
	node, err := r.Client.CoreV1().Nodes().Get(ctx, r.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// No Node object: no pod could run here to use the volume.
		return nil
	} else if err != nil {
		return fmt.Errorf("reading Node %s: %w", r.NodeName, err)
	}
	if !ownership.TopologyAdmits(class.AllowedTopologies, node.Labels) {
		return nil
	}
	if invalid == nil {
		// A claim the node would refuse is left to other nodes: a
		// filesystem volume where its size cannot be enforced, or one
		// the node has no room for. One that no node can hold stays
		// Pending, and the PV controller's Event says it waits for
		// this driver (and the refusing nodes' CapacityNotEnforced
		// Events say why they do not take it).
		if reason, allowed := r.Volumes.UnenforcedCapacity(); req.mode == corev1.PersistentVolumeFilesystem && reason != nil && !allowed {
			r.log.V(1).Infof("not placing claim %s here: filesystem volumes are refused on this node: %v", ownership.DescribeClaim(pvc), reason)
			return nil
		}
		// One offer at a time, and the claims placed here that have
		// no volume yet count as taken: the space they will take is not
		// in the accounting yet, and two claims offered for the same
		// room would leave one placed here with no room, failing until
		// handBack gives it up.
		r.placing.mu.Lock()
		defer r.placing.mu.Unlock()
		space, err := r.Volumes.Space(ctx)
		if err != nil {
			return err
		}
		pending, err := r.pendingPlacements(ctx)
		if err != nil {
			return err
		}
		if room := space.Available(req.overcommit) - pending; req.bytes > room {
			r.log.V(1).Infof("not placing claim %s here: %d bytes asked, %d available (%d more promised to claims placed here)",
				ownership.DescribeClaim(pvc), req.bytes, room, pending)
			return nil
		}
	}
	// The cache may be behind: the patch is conditional on the version
	// this decision was made from.
	placed, err := r.patchClaim(ctx, pvc, "", map[string]any{"metadata": map[string]any{
		"resourceVersion": pvc.ResourceVersion,
		"annotations":     map[string]string{ownership.AnnSelectedNode: r.NodeName},
	}})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// Another node took it, or the claim changed or went: the
		// informer brings the new state, which is requeued if still
		// unplaced.
		return nil
	case err != nil:
		return fmt.Errorf("placing claim %s on this node: %w", ownership.DescribeClaim(pvc), err)
	}
	if invalid == nil {
		r.placing.took(placed.UID, req.bytes)
	}
	r.log.Infof("placed claim %s of Immediate StorageClass %s on this node", ownership.DescribeClaim(placed), class.Name)
	r.recorder.Eventf(placed, corev1.EventTypeNormal, ReasonPlaced,
		"StorageClass %s binds immediately; node %s took the claim and provisions its volume", class.Name, r.NodeName)
	return nil
}

// offerFreedRoomLoop offers this node again for the unplaced claims of
// Immediate classes after each change of its data filesystem (a volume
// deleted frees room), at most once per second: a claim no node had room
// for, or one handed back, is taken as soon as a node has room, not at
// the next resync. The scheduler does the same for WaitForFirstConsumer
// claims when a node publishes new capacity.
func (r *run) offerFreedRoomLoop(ctx context.Context) {
	for {
		changed := r.Volumes.Changed()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		r.requeueClaims(r.claimQ.Add, func(pvc *corev1.PersistentVolumeClaim) bool { return ownership.ClaimUnplaced(pvc, r.Driver) })
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(time.Second):
		}
	}
}

// placements serializes this node's offers for unplaced claims, and keeps
// the sizes of the claims it took until the informer shows them placed
// here: the room a claim took must not be offered again in between.
type placements struct {
	mu    sync.Mutex
	taken map[types.UID]int64
}

// took records that this node placed the claim with uid and size bytes on
// itself. The caller holds mu.
func (p *placements) took(uid types.UID, bytes int64) {
	if p.taken == nil {
		p.taken = map[types.UID]int64{}
	}
	p.taken[uid] = bytes
}

// pendingPlacements sums the requests of the claims placed on this node
// (by the scheduler, or by this node's own offers) that are waiting for a
// volume none has been made for yet: room the accounting does not show
// taken. A claim this node took that the informer does not show placed
// yet counts by the size it was taken with; one the informer shows
// placed, bound or gone is forgotten. The caller holds r.placing.mu.
func (r *run) pendingPlacements(ctx context.Context) (int64, error) {
	entries, err := r.Volumes.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing volumes: %w", err)
	}
	made := map[string]bool{}
	for _, e := range entries {
		made[e.ID] = true
	}
	var sum int64
	unplaced := map[types.UID]bool{}
	for _, o := range r.claimIdx.List() {
		pvc, ok := o.(*corev1.PersistentVolumeClaim)
		if !ok {
			continue
		}
		if ownership.ClaimUnplaced(pvc, r.Driver) {
			unplaced[pvc.UID] = true
		}
		if !r.needsVolume(pvc) || made[ownership.VolumeIDFor(pvc.UID)] {
			continue
		}
		if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			sum += q.Value()
		}
	}
	for uid, bytes := range r.placing.taken {
		if unplaced[uid] && !made[ownership.VolumeIDFor(uid)] {
			sum += bytes
		} else {
			delete(r.placing.taken, uid)
		}
	}
	return sum, nil
}
