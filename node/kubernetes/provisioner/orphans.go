package provisioner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
)

// Orphans are volumes on this node that nothing refers to: the process died
// between creating a volume and its PV and the claim was deleted meanwhile,
// or an administrator deleted a PV by hand. The reconciler runs at start and
// then periodically. A volume is removed only when all of these hold:
//
//   - its ID has this driver's format (pvc-<uid>), so we made it;
//   - no PV of that name exists, by a live read from the API server (the
//     informer only covers PVs carrying this node's label);
//   - no claim with that UID exists in the (synced) claim informer;
//   - the volume layer has no reclaim policy recorded for it (so no PV was
//     ever seen for it: the crash between volume and PV), or the recorded
//     policy is Delete (its PV was deleted before we could release it);
//   - all of this has been true on every check for the whole grace period,
//     which is far longer than informer lag and than the gap between
//     creating a volume and creating its PV;
//   - the node is connected to the cluster the volume was made in
//     (quarantine.go).
//
// A volume recorded as Delete is then not removed but moved into
// quarantine, and removed after a retention period unless its PV comes
// back (quarantine.go): its PV was seen, and its absence may be a restore
// of the cluster's etcd rather than a deletion. Only a volume with no
// record, which never had a PV, is removed at once.
//
// A volume recorded as Retain whose PV and claim are gone (an administrator
// deleted a retained PV by hand) is reported, with a Warning Event on the
// Node, and kept: the data is the administrator's to remove. So is a volume
// whose record cannot be read. Anything else found in the volumes directory
// is reported and kept as well.
//
// The record is written when the PV is created and whenever the informer
// shows a PV of ours (add, update, delete), so a policy an administrator
// patches from Delete to Retain is recorded before the PV disappears. One
// window remains: a PV patched to Retain and deleted while plinth-node is
// down is remembered with the policy it had when last seen.

// orphanCheckInterval is how often the reconciler looks for orphans.
func orphanCheckInterval(grace time.Duration) time.Duration {
	return min(max(grace/4, time.Second), time.Minute)
}

func (r *run) reconcileOrphansLoop(ctx context.Context) {
	grace := r.OrphanGracePeriod
	r.adoptCluster(ctx)
	ticker := r.clock.NewTicker(orphanCheckInterval(grace))
	defer ticker.Stop()
	for {
		if err := r.reconcileOrphans(ctx, grace); err != nil && ctx.Err() == nil {
			r.log.Warningf("orphan check: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// reconcileOrphans runs one orphan check, and one of the quarantine, if
// the node is connected to the cluster its volumes were made in.
func (r *run) reconcileOrphans(ctx context.Context, grace time.Duration) error {
	entries, err := r.Volumes.List(ctx)
	if err != nil {
		return fmt.Errorf("listing volumes: %w", err)
	}
	quarantined, err := r.Volumes.Quarantined(ctx)
	if err != nil {
		return fmt.Errorf("listing quarantined volumes: %w", err)
	}
	// The cluster's identity is read live, at most once a round and only
	// when a volume is due: a node with nothing to act on costs the API
	// server nothing.
	inCluster := sync.OnceValues(func() (bool, error) {
		return r.inRecordedCluster(ctx, len(entries)+len(quarantined))
	})
	defer r.reconcileQuarantine(ctx, quarantined, inCluster)
	now := r.clock.Now()
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		id := e.ID
		if id == "" || (e.Problem != "" && e.Pending == "") {
			// Not a volume (a foreign file), or a volume in a state the
			// volume manager cannot read: what is not provably ours and
			// whole is reported, never removed.
			r.reportForeign(e)
			continue
		}
		present[id] = true
		if !r.unreferenced(id) {
			r.forgetCandidate(id)
			continue
		}
		if keep, why := r.mustKeep(ctx, id); keep {
			r.forgetCandidate(id)
			r.reportKept(id, why)
			continue
		}
		first := r.candidateSince(id, now)
		if now.Sub(first) < grace {
			continue
		}
		if err := r.removeOrphan(ctx, id, now.Sub(first), inCluster); err != nil {
			r.log.Warningf("removing orphaned volume %s: %v", id, err)
		}
	}
	r.orphanMu.Lock()
	for id := range r.firstSeen {
		if !present[id] {
			delete(r.firstSeen, id)
		}
	}
	for id := range r.kept {
		if !present[id] {
			delete(r.kept, id)
		}
	}
	r.orphanMu.Unlock()
	return nil
}

// mustKeep reports whether an unreferenced volume must be kept whatever its
// age, and why: its PV had reclaim policy Retain, or its record (which
// might say so) cannot be read.
func (r *run) mustKeep(ctx context.Context, id string) (bool, string) {
	p, err := r.Volumes.ReclaimPolicy(ctx, id)
	switch {
	case err != nil:
		return true, fmt.Sprintf("its reclaim policy cannot be read (%v)", err)
	case p == volume.ReclaimRetain:
		return true, "its PV had reclaim policy Retain"
	}
	return false, ""
}

// reportKept says, once per incarnation of the controller and volume, that
// an unreferenced volume is kept: in the log and as a Warning Event on the
// Node, since no PV or claim is left to carry it and the operator has
// space to reclaim by hand.
func (r *run) reportKept(id, why string) {
	r.orphanMu.Lock()
	seen := r.kept[id]
	r.kept[id] = true
	r.orphanMu.Unlock()
	if seen {
		return
	}
	r.log.Warningf("keeping volume %s and its data although no PV and no claim refer to it: %s; remove it by hand when it is no longer needed", id, why)
	r.recorder.Eventf(r.nodeRef(), corev1.EventTypeWarning, ReasonOrphanRetained,
		"Keeping volume %s and its data although no PV and no claim refer to it: %s; remove it by hand when it is no longer needed", id, why)
}

// unreferenced reports, from the caches, whether no PV and no claim refer to
// the volume. A volume whose ID is not in our format is never unreferenced:
// we do not know what refers to it.
func (r *run) unreferenced(id string) bool {
	uid, ok := ownership.ClaimUIDOf(id)
	if !ok {
		r.reportForeign(volume.Entry{Info: volume.Info{ID: id}, Problem: "not a volume ID this provisioner makes"})
		return false
	}
	if _, exists := r.volumes.Get(id); exists {
		r.forgetKept(id)
		return false
	}
	if claims, _ := r.claimIdx.ByIndex(ownership.UIDIndex, string(uid)); len(claims) > 0 {
		r.forgetKept(id)
		return false
	}
	return true
}

// forgetKept lets a kept volume that is referenced again (an administrator
// made a new PV for it) be reported again if it is orphaned again.
func (r *run) forgetKept(id string) {
	r.orphanMu.Lock()
	delete(r.kept, id)
	r.orphanMu.Unlock()
}

// recordPolicy records on the node the reclaim policy of the volume pv
// refers to (see recordedPolicy). A volume that is not on this node's disk,
// or is being deleted, has nothing to record.
func (r *run) recordPolicy(ctx context.Context, pv *corev1.PersistentVolume) error {
	id, p, ok := recordedPolicy(pv, r.Driver, r.hostname)
	if !ok {
		return nil
	}
	if err := r.Volumes.SetReclaimPolicy(ctx, id, p); err != nil && !errors.Is(err, volume.ErrNotFound) {
		return fmt.Errorf("recording reclaim policy of PV %s: %w", pv.Name, err)
	}
	return nil
}

func (r *run) candidateSince(id string, now time.Time) time.Time {
	r.orphanMu.Lock()
	defer r.orphanMu.Unlock()
	first, ok := r.firstSeen[id]
	if !ok {
		r.firstSeen[id] = now
		r.log.Infof("volume %s has no PV and no claim; removing it (or, if it had a Delete PV, moving it into quarantine) if that is still so in %s", id, r.OrphanGracePeriod)
		return now
	}
	return first
}

func (r *run) forgetCandidate(id string) {
	r.orphanMu.Lock()
	delete(r.firstSeen, id)
	r.orphanMu.Unlock()
}

// reportForeign logs an entry of the volumes directory that is left alone,
// once per incarnation of the controller.
func (r *run) reportForeign(e volume.Entry) {
	key := "report:" + e.Name + "/" + e.ID
	r.orphanMu.Lock()
	_, seen := r.reported[key]
	r.reported[key] = true
	r.orphanMu.Unlock()
	if !seen {
		r.log.Warningf("leaving %q (volume %q) in the volumes directory alone: %s", e.Name, e.ID, e.Problem)
	}
}

// nodeRef refers to this node's Node object the way the kubelet's own Events
// do (a Node's Events use its name as UID).
func (r *run) nodeRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.NodeName, UID: types.UID(r.NodeName)}
}

// removeOrphan re-checks an orphan under the volume's lock, with a live read
// of its PV, and removes it.
func (r *run) removeOrphan(ctx context.Context, id string, age time.Duration, inCluster func() (bool, error)) error {
	unlock := r.locks.Lock(id)
	defer unlock()
	if !r.unreferenced(id) {
		r.forgetCandidate(id)
		return nil
	}
	_, err := r.Client.CoreV1().PersistentVolumes().Get(ctx, id, metav1.GetOptions{})
	switch {
	case err == nil:
		// A PV exists but our informer does not see it (its label was
		// removed, or the watch lags): not an orphan.
		r.forgetCandidate(id)
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("checking for PV %s: %w", id, err)
	}
	// Once more, after the live read: the deleted PV's last state may have
	// been recorded since the last check.
	if keep, why := r.mustKeep(ctx, id); keep {
		r.forgetCandidate(id)
		r.reportKept(id, why)
		return nil
	}
	if ok, err := inCluster(); !ok {
		return err // said once by inRecordedCluster
	}
	if p, err := r.Volumes.ReclaimPolicy(ctx, id); err != nil || p != volume.ReclaimUnrecorded {
		if err != nil {
			return err
		}
		// Its PV was seen: its absence may be a restore, not a deletion.
		return r.quarantineOrphan(ctx, id, age)
	}
	start := time.Now()
	err = r.Volumes.Delete(ctx, id)
	r.Metrics.Observe(metrics.Delete, start, metrics.Reason(err))
	if err != nil {
		return fmt.Errorf("deleting volume: %w", err)
	}
	r.forgetCandidate(id)
	r.log.Infof("audit: deleted orphaned volume %s and its data: it never had a PV, and no claim referred to it for %s", id, age.Round(time.Second))
	// No PV or claim is left to carry the Event; the node is where the
	// volume lived, and `kubectl describe node` is where one looks.
	r.recorder.Eventf(r.nodeRef(), corev1.EventTypeNormal, ReasonOrphanDeleted,
		"Deleted orphaned volume %s and its data: it never had a PV, and no claim referred to it for %s", id, age.Round(time.Second))
	return nil
}
