package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
)

// syncClaim provisions the volume and PV for one claim, or confirms an
// earlier attempt did, and binds the claim to its PV (bindClaim). It is
// safe to run any number of times, from any point a previous run (or
// process) stopped at. Claims no node was chosen for yet never reach it:
// the scheduler or the admission server's placer (package placement)
// places them, and the node hears of a claim once it is placed here.
func (r *run) syncClaim(ctx context.Context, key string) error {
	pvc, ok := r.claim(key)
	if !ok {
		r.claimQ.Forget(key)
		return nil
	}
	if !r.needsVolume(pvc) {
		return nil
	}
	id := ownership.VolumeIDFor(pvc.UID)
	unlock := r.locks.Lock(id)
	defer unlock()
	// Re-read under the lock: the orphan reconciler may have decided
	// meanwhile that this claim is gone and removed its volume.
	if pvc, ok = r.claim(key); !ok || !r.needsVolume(pvc) || ownership.VolumeIDFor(pvc.UID) != id {
		return nil
	}
	if pv, done := r.provisioned(pvc, id); done {
		return r.bindClaim(ctx, pvc, pv)
	}
	if waiting, err := r.stillElsewhere(ctx, pvc, id); waiting || err != nil {
		return err
	}
	// An attempt, counted from here: whatever happens next is this
	// node trying to provision the claim.
	start, reason := time.Now(), ""
	defer func() { r.Metrics.Observe(metrics.Provision, start, reason) }()
	req, err := r.resolveRequest(pvc)
	if req == nil {
		// The claim or its class cannot be served as they are.
		reason = metrics.ReasonInvalid
		return err
	}
	if ok, err := r.resolveSource(ctx, key, pvc, req); !ok {
		reason = metrics.ReasonInvalid
		return err
	}
	info, err := r.ensureVolume(ctx, pvc, req)
	if err != nil {
		reason = metrics.Reason(err)
		if req.handsBack(err) {
			return r.handBack(ctx, key, pvc, req, err)
		}
		return err
	}
	// The volume may be slightly larger than asked (sizes are rounded up
	// to whole blocks); the PV states what the volume really holds.
	req.size = *resource.NewQuantity(info.CapacityBytes, resource.BinarySI)
	pv, err := r.ensurePV(ctx, pvc, req)
	if pv == nil {
		reason = metrics.Reason(err)
		if err == nil {
			reason = metrics.ReasonInvalid // the API server refused the PV
		}
		return err
	}
	// The claim first: its pod waits for the binding, not for the record
	// or the Event.
	err = r.bindClaim(ctx, pvc, pv)
	r.reportProvisioned(ctx, pvc, req, pv)
	return err
}

// provisioned reports whether the PV of an earlier attempt exists, and
// returns it; what is left is binding the claim to it.
func (r *run) provisioned(pvc *corev1.PersistentVolumeClaim, id string) (*corev1.PersistentVolume, bool) {
	pv, exists := r.volumes.Get(id)
	if !exists {
		return nil, false
	}
	// A PV of that name for another claim cannot exist since the name
	// contains this claim's UID, but say so if it does (bindClaim leaves
	// such a pair alone).
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		r.log.Warningf("PV %s exists but is not for claim %s; leaving both alone", id, ownership.DescribeClaim(pvc))
	}
	return pv, true
}

// resolveRequest reads the claim's StorageClass and validates the claim
// against it. A nil request with a nil error means the claim cannot be
// served as it is (reported in an Event; an update of the claim or its
// class requeues it); with an error, the class could not be read yet.
func (r *run) resolveRequest(pvc *corev1.PersistentVolumeClaim) (*request, error) {
	className := ""
	if pvc.Spec.StorageClassName != nil {
		className = *pvc.Spec.StorageClassName
	}
	if className == "" {
		r.failClaim(pvc, "The claim has no StorageClass.")
		return nil, nil
	}
	class, err := r.classes.Get(className)
	if apierrors.IsNotFound(err) {
		// The class may still be created; onClass requeues the claim then,
		// and backoff retries cover a missed event.
		r.failClaim(pvc, fmt.Sprintf("StorageClass %q not found; it is used as soon as it is created.", className))
		return nil, fmt.Errorf("StorageClass %q not found", className)
	} else if err != nil {
		return nil, fmt.Errorf("reading StorageClass %q: %w", className, err)
	}
	req, err := validateClaim(pvc, class, r.Driver)
	if err != nil {
		r.failClaim(pvc, err.Error())
		return nil, nil
	}
	return req, nil
}

// ensureVolume creates the claim's volume, or finds the one an earlier
// attempt created. Failures are reported in an Event and retried with
// backoff, except those another node may not have (fitsElsewhere), which
// the caller reports when it hands the claim back (handBack).
func (r *run) ensureVolume(ctx context.Context, pvc *corev1.PersistentVolumeClaim, req *request) (volume.Info, error) {
	// The same accounting as the capacity published for the class: a
	// claim that does not fit is refused here (ErrNoSpace, no volume),
	// whatever the scheduler thought.
	mode := req.volumeMode()
	if err := r.recordCluster(ctx); err != nil {
		return volume.Info{}, err
	}
	info, err := r.Volumes.Create(ctx, req.id, mode, req.bytes, req.createOptions()...)
	if err != nil {
		switch {
		case req.handsBack(err):
			// Reported by handBack, which says what happens next.
		case req.source != nil && errors.Is(err, volume.ErrNotFound):
			r.failClaim(pvc, fmt.Sprintf("Cannot copy %s into a new volume on node %s: its data is not on this node (%v); will retry.", req.source.Name, r.NodeName, err))
		case volume.Infeasible(err):
			r.failClaim(pvc, r.cannotProvision(req, err)+".")
		default:
			r.failClaim(pvc, fmt.Sprintf("%v (will retry).", err))
		}
		return volume.Info{}, err
	}
	return info, nil
}

// ensurePV creates the claim's PV, or finds the one an earlier attempt
// created. A nil PV with a nil error means the claim will never have a PV
// of this node's, and the volume was removed again: the API server refused
// the PV for good, or a PV of that name made elsewhere exists.
func (r *run) ensurePV(ctx context.Context, pvc *corev1.PersistentVolumeClaim, req *request) (*corev1.PersistentVolume, error) {
	pv := buildPV(pvc, req, r.Driver, r.hostname, r.NodeName)
	// The record before the PV: a volume this node made a PV for always
	// has its reclaim policy on the node's disk, even when the node stops
	// right after the PV is made. So a volume without a record never had
	// a PV (a crash leftover, removed after the grace period), and one
	// whose PV an etcd restore took away goes into quarantine.
	if err := r.recordPolicy(ctx, pv); err != nil {
		r.failClaim(pvc, fmt.Sprintf("%v (will retry).", err))
		return nil, err
	}
	made, err := r.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// An earlier attempt created it but we did not see it yet.
		made, err = r.Client.CoreV1().PersistentVolumes().Get(ctx, req.id, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading existing PV %s: %w", req.id, err)
		}
		if made.Spec.ClaimRef == nil || made.Spec.ClaimRef.UID != pvc.UID {
			return nil, fmt.Errorf("PV %s exists but is not for claim %s", req.id, ownership.DescribeClaim(pvc))
		}
		if made.Labels[ownership.LabelNode] != r.label {
			return nil, r.madeElsewhere(ctx, pvc, made)
		}
	case apierrors.IsInvalid(err):
		// The API server will never take this PV (say, a StorageClass
		// mount option it rejects): retrying is pointless, and the volume,
		// which no PV refers to, must not stay behind half-provisioned.
		r.failClaim(pvc, fmt.Sprintf("The API server rejected PV %s: %v", req.id, err))
		if derr := r.Volumes.Delete(ctx, req.id); derr != nil {
			return nil, fmt.Errorf("removing volume %s after its PV was rejected: %w", req.id, derr)
		}
		return nil, nil
	case err != nil:
		// The volume stays: the retry reuses it, and if the claim goes away
		// first, the orphan reconciler removes it.
		r.failClaim(pvc, fmt.Sprintf("Creating PV %s: %v (will retry).", req.id, err))
		return nil, fmt.Errorf("creating PV %s: %w", req.id, err)
	}
	r.volumes.Remember(made)
	return made, nil
}

// madeElsewhere handles a PV for the claim that this node did not make,
// though the claim is placed on this node: it does not bind the claim to
// it, record it, or call it provisioned, and it removes the volume it made
// for the claim, to which no PV of this node will refer. The PV controller
// may still bind the claim to that PV (if it fits the claim), and the
// claim's pods then go where the PV's node affinity says. The admission
// policies let a node create a PV only with its own label, so the label
// names the node that made it (an administrator may also have made it, to
// pre-bind the claim), which the Warning Event says: a node that makes PVs
// for claims placed elsewhere is one to look at. Where the control plane
// runs the admission webhook (package admission), no node can make it.
func (r *run) madeElsewhere(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	msg := fmt.Sprintf("PV %s for this claim already exists, but node %s, on which the claim was placed, did not make it: the PV is labelled %s=%q. "+
		"The PV controller may bind the claim to it, and its pods would then run where that PV is; if no administrator made it for this claim, delete the claim and find out who did.",
		pv.Name, r.NodeName, ownership.LabelNode, pv.Labels[ownership.LabelNode])
	r.log.Warningf("claim %s: %s", ownership.DescribeClaim(pvc), msg)
	r.recorder.Event(pvc, corev1.EventTypeWarning, ReasonVolumeMadeElsewhere, msg)
	if err := r.Volumes.Delete(ctx, pv.Name); err != nil {
		return fmt.Errorf("removing volume %s, since PV %s was made elsewhere: %w", pv.Name, pv.Name, err)
	}
	r.elsewhere.Store(pvc.UID, true)
	return nil
}

// stillElsewhere reports whether the claim's PV, made elsewhere and
// reported (madeElsewhere), still exists: then the sync makes no volume
// and says nothing more. The PV is read from the API server, since this
// node's PV informer sees only its own; once it is gone, the claim is
// provisioned here as any other.
func (r *run) stillElsewhere(ctx context.Context, pvc *corev1.PersistentVolumeClaim, id string) (bool, error) {
	if _, reported := r.elsewhere.Load(pvc.UID); !reported {
		return false, nil
	}
	_, err := r.Client.CoreV1().PersistentVolumes().Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.elsewhere.Delete(pvc.UID)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading PV %s, made elsewhere: %w", id, err)
	}
	return true, nil
}

// reportProvisioned records the new PV's reclaim policy on the node again
// (ensurePV recorded it before the PV was made; the PV as the API server
// took it is what counts) and tells the user. A failure here is retried
// through the PV's sync (syncVolume), as is a crash: the informer's first
// list after the restart records it.
func (r *run) reportProvisioned(ctx context.Context, pvc *corev1.PersistentVolumeClaim, req *request, pv *corev1.PersistentVolume) {
	if err := r.recordPolicy(ctx, pv); err != nil {
		r.log.Warningf("%v (will retry)", err)
		r.volumeQ.Add(pv.Name)
	}
	r.log.Infof("provisioned %s for claim %s: %s, %d bytes", pv.Name, ownership.DescribeClaim(pvc), req.mode, req.bytes)
	// One Event per provisioning: on a node that cannot enforce capacity it
	// is the warning, which then says both things.
	if req.mode == corev1.PersistentVolumeFilesystem && !r.Volumes.CapacityEnforced() {
		r.recorder.Eventf(pvc, corev1.EventTypeWarning, ReasonCapacityNotEnforced,
			"Provisioned volume %s on node %s, but it is not limited to its %s: this node cannot enforce quotas (allowed by the operator)",
			pv.Name, r.NodeName, req.size.String())
	} else {
		r.recorder.Eventf(pvc, corev1.EventTypeNormal, ReasonProvisioningSucceeded,
			"Successfully provisioned volume %s on node %s", pv.Name, r.NodeName)
	}
}

// cannotProvision is the start of the Event for a claim this node cannot
// make a volume for: the size asked, the node, and why.
func (r *run) cannotProvision(req *request, cause error) string {
	return fmt.Sprintf("Cannot provision %s on node %s: %v", req.size.String(), r.NodeName, cause)
}

func (r *run) failClaim(pvc *corev1.PersistentVolumeClaim, msg string) {
	r.log.Warningf("provisioning for claim %s failed: %s", ownership.DescribeClaim(pvc), msg)
	r.recorder.Event(pvc, corev1.EventTypeWarning, ReasonProvisioningFailed, msg)
}

// errNotOurs stops deletion of a PV that changed under us.
var errNotOurs = errors.New("PV is no longer a released volume of this node")

// syncVolume records a PV's reclaim policy on the node (see recordPolicy)
// and, for a released PV whose reclaim policy is Delete, deletes the volume
// and then the PV. Every step is idempotent, so a crash anywhere is
// finished by the next attempt.
func (r *run) syncVolume(ctx context.Context, name string) error {
	pv, exists := r.volumes.Get(name)
	if !exists {
		r.volumeQ.Forget(name)
		return nil
	}
	if owns, _ := ownership.OwnsVolume(pv, r.Driver, r.hostname); owns && pv.DeletionTimestamp == nil {
		// A PV of a quarantined volume is back (a restore): its data
		// first, then its record.
		r.restoreQuarantined(ctx, pv.Name, "its PV "+pv.Name+" exists")
	}
	if err := r.recordPolicy(ctx, pv); err != nil {
		return err
	}
	if !deletable(pv) {
		return nil
	}
	if ours, why := ownership.OwnsVolume(pv, r.Driver, r.hostname); !ours {
		r.log.V(1).Infof("ignoring released PV %s: %s", name, why)
		return nil
	}
	// The cache may be behind: an administrator could have made the PV
	// Available again and it may be bound by now. Only the API server's
	// current word allows destroying data.
	live, err := r.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading PV %s: %w", name, err)
	}
	if ours, _ := ownership.OwnsVolume(live, r.Driver, r.hostname); !ours || !deletable(live) || live.UID != pv.UID {
		r.log.Infof("not deleting PV %s: %v", name, errNotOurs)
		return nil
	}
	claim := "<none>"
	if ref := live.Spec.ClaimRef; ref != nil {
		claim = fmt.Sprintf("%s/%s (uid %s)", ref.Namespace, ref.Name, ref.UID)
	}
	start := time.Now()
	err = r.Volumes.Delete(ctx, name)
	r.Metrics.Observe(metrics.Delete, start, metrics.Reason(err))
	if err != nil {
		r.recorder.Eventf(live, corev1.EventTypeWarning, ReasonVolumeDeleteFailed, "deleting volume data: %v", err)
		return fmt.Errorf("deleting volume %s: %w", name, err)
	}
	r.log.Infof("audit: deleted volume %s and its data: PV released by claim %s, reclaim policy Delete", name, claim)
	r.recorder.Eventf(live, corev1.EventTypeNormal, ReasonVolumeDeleted,
		"Deleted volume %s and its data on node %s (claim %s released, reclaim policy Delete)", name, r.NodeName, claim)
	uid := live.UID
	err = r.Client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting PV %s: %w", name, err)
	}
	r.log.Infof("audit: deleted PV %s", name)
	return nil
}

// deletable reports whether a PV is Released with policy Delete and not
// already being deleted. A PV with a deletion timestamp is one whose data we
// deleted before deleting it (it waits for the pv-protection finalizer), or
// one an administrator deleted: its volume then becomes an orphan and is
// removed by the reconciler. Either way there is nothing to do here, and
// acting again would only repeat Events and audit lines.
func deletable(pv *corev1.PersistentVolume) bool {
	return pv.DeletionTimestamp == nil && pv.Status.Phase == corev1.VolumeReleased &&
		pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete
}
