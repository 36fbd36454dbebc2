package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/metrics"
)

// The absence of a PV is no proof that its data may go. An etcd restored
// from a backup older than the PV, a cluster rebuilt from manifests, a
// kubeconfig of another cluster and another node deleting a Released PV
// all look, from here, like a volume nothing refers to. So:
//
//   - The volumes record the cluster they were made in: the UID of its
//     kube-system namespace, which a restore of its etcd keeps and a new
//     cluster does not have. It is recorded before the first volume is
//     made, and adopted at start by a node whose volumes predate it
//     (or, if the API server cannot be read then, the first time the
//     sweep is about to act). A node connected to another cluster sweeps
//     nothing: no orphan is removed or quarantined and no quarantined
//     volume is removed. It says so once, in its log and a Warning Event
//     on its Node, and goes on serving.
//   - A volume whose PV was seen with policy Delete, and is gone without
//     having been released here, is moved into quarantine (volume.Manager
//     Quarantine: one rename on the data filesystem; its room stays
//     counted) once the grace period is over, and removed only after
//     OrphanRetention. A PV or claim of it that appears meanwhile (a
//     restore) gets it back untouched, from the sweep, from the PV's sync
//     (syncVolume) or from the claim's provisioning (Create restores).
//   - A volume that never had a PV (no record: the process stopped
//     between the volume and its record, which ensurePV writes before
//     the PV, and the claim went) is a crash leftover, removed after the
//     grace period as before.

// clusterUID reads, live, the identity of the cluster the node is
// connected to.
func (r *run) clusterUID(ctx context.Context) (string, error) {
	ns, err := r.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the identity of this cluster (the UID of namespace %s): %w", metav1.NamespaceSystem, err)
	}
	if ns.UID == "" {
		return "", fmt.Errorf("reading the identity of this cluster: namespace %s has no UID", metav1.NamespaceSystem)
	}
	return string(ns.UID), nil
}

// recordCluster records the cluster before a volume is made in it. The
// UID is read once per incarnation; a failure fails the provisioning
// attempt, which is retried.
func (r *run) recordCluster(ctx context.Context) error {
	r.clusterMu.Lock()
	defer r.clusterMu.Unlock()
	if r.recordedCluster {
		return nil
	}
	uid, err := r.clusterUID(ctx)
	if err != nil {
		return err
	}
	if _, err := r.Volumes.RecordCluster(uid); err != nil {
		return err
	}
	// A different cluster already recorded is the sweep's to report.
	r.recordedCluster = true
	return nil
}

// adoptCluster records, at start, the cluster of volumes made before
// clusters were recorded, while the node is connected, as until now, to
// theirs. A failure leaves it to the check before the sweep first acts.
func (r *run) adoptCluster(ctx context.Context) {
	if id, err := r.Volumes.ClusterID(); err != nil || id != "" {
		return
	}
	entries, err := r.Volumes.List(ctx)
	if err != nil {
		return
	}
	qs, err := r.Volumes.Quarantined(ctx)
	if err != nil || len(entries)+len(qs) == 0 {
		return
	}
	if _, err := r.inRecordedCluster(ctx, len(entries)+len(qs)); err != nil && ctx.Err() == nil {
		r.log.Warningf("recording the cluster of this node's volumes: %v", err)
	}
}

// inRecordedCluster reports whether the node is connected to the cluster
// its volumes were made in, adopting the cluster it is connected to when
// none is recorded and volumes exist. Only then may the sweep act; it
// asks before it quarantines or removes anything.
func (r *run) inRecordedCluster(ctx context.Context, volumes int) (bool, error) {
	uid, err := r.clusterUID(ctx)
	if err != nil {
		return false, fmt.Errorf("%w; no orphaned volume is removed until it can be read", err)
	}
	recorded, err := r.Volumes.ClusterID()
	if err != nil {
		return false, err
	}
	if recorded == "" {
		if volumes == 0 {
			return true, nil // nothing to judge; the first volume records it
		}
		if recorded, err = r.Volumes.RecordCluster(uid); err != nil {
			return false, err
		}
		if recorded == uid {
			r.log.Infof("volumes on this node from before cluster IDs were recorded: recorded cluster %s (the UID of namespace %s) as theirs", uid, metav1.NamespaceSystem)
		}
	}
	if recorded != uid {
		r.reportOtherCluster(recorded, uid)
		return false, nil
	}
	return true, nil
}

// reportOtherCluster says, once per incarnation, that the node deletes
// nothing because it is connected to another cluster.
func (r *run) reportOtherCluster(recorded, uid string) {
	if r.otherCluster.Swap(true) {
		return
	}
	msg := fmt.Sprintf("The volumes on this node were made in cluster %s, but this node is connected to cluster %s (UIDs of namespace %s): "+
		"their PVs are not in this cluster, so Plinth storage removes and quarantines none of them, and removes no quarantined volume; "+
		"it goes on serving. If the data disk moved to this cluster on purpose, remove state/cluster-id in the data directory and restart plinth-node (docs/operating.md).",
		recorded, uid, metav1.NamespaceSystem)
	r.log.Warning(msg)
	r.recorder.Event(r.nodeRef(), corev1.EventTypeWarning, ReasonOtherCluster, msg)
}

// quarantineOrphan moves an orphan whose Delete PV vanished into
// quarantine. Callers hold the volume's lock and re-checked it.
func (r *run) quarantineOrphan(ctx context.Context, id string, age time.Duration) error {
	if err := r.Volumes.Quarantine(ctx, id, r.clock.Now()); err != nil {
		return fmt.Errorf("quarantining volume: %w", err)
	}
	r.forgetCandidate(id)
	until := r.clock.Now().Add(r.OrphanRetention).UTC().Format(time.RFC3339)
	r.log.Warningf("audit: moved volume %s and its data into quarantine: its PV (reclaim policy Delete) and claim are gone, and were so for %s, without the PV being released here; "+
		"it is kept until %s, and a PV of that name made before then gets it back", id, age.Round(time.Second), until)
	r.recorder.Eventf(r.nodeRef(), corev1.EventTypeWarning, ReasonOrphanQuarantined,
		"Moved volume %s and its data into quarantine: its PV (reclaim policy Delete) and claim were gone for %s without the PV being released. "+
			"It stays, counted in this node's capacity, until %s; a PV of that name made before then (a restore) gets it back untouched",
		id, age.Round(time.Second), until)
	return nil
}

// reconcileQuarantine gives quarantined volumes back to a PV or claim that
// refers to them again, and removes those whose retention is over.
func (r *run) reconcileQuarantine(ctx context.Context, qs []volume.QuarantinedVolume, inCluster func() (bool, error)) {
	now := r.clock.Now()
	for _, q := range qs {
		if !r.unreferenced(q.ID) {
			r.restoreQuarantined(ctx, q.ID, "a PV or claim refers to it again")
			continue
		}
		if q.Since.IsZero() {
			r.reportForeign(volume.Entry{Name: "quarantine/" + q.ID, Info: volume.Info{ID: q.ID},
				Problem: "in quarantine without a record of since when; remove it by hand when it is no longer needed"})
			continue
		}
		if now.Sub(q.Since) < r.OrphanRetention {
			continue
		}
		if ok, err := inCluster(); !ok {
			if err != nil {
				r.log.Warningf("quarantined volume %s: %v", q.ID, err)
			}
			return
		}
		if err := r.removeQuarantined(ctx, q.ID, now.Sub(q.Since)); err != nil {
			r.log.Warningf("removing quarantined volume %s: %v", q.ID, err)
		}
	}
}

// restoreQuarantined moves volume id back from quarantine, if it is there.
func (r *run) restoreQuarantined(ctx context.Context, id, why string) {
	unlock := r.locks.Lock(id)
	defer unlock()
	err := r.Volumes.Restore(ctx, id)
	switch {
	case errors.Is(err, volume.ErrNotFound), ctx.Err() != nil:
		// Not in quarantine, or the run ends (Restore checks the
		// context first, before it knows either way).
		return
	case err != nil:
		r.log.Warningf("volume %s is in quarantine and %s, but cannot be moved back: %v", id, why, err)
		return
	}
	r.log.Infof("audit: moved volume %s back from quarantine, untouched: %s", id, why)
	r.recorder.Eventf(r.nodeRef(), corev1.EventTypeNormal, ReasonOrphanRestored,
		"Moved volume %s back from quarantine, its data untouched: %s", id, why)
}

// removeQuarantined removes a quarantined volume whose retention is over,
// after the same checks as an orphan: under its lock, unreferenced, and
// no PV by a live read.
func (r *run) removeQuarantined(ctx context.Context, id string, age time.Duration) error {
	unlock := r.locks.Lock(id)
	defer unlock()
	if !r.unreferenced(id) {
		return nil
	}
	if _, err := r.Client.CoreV1().PersistentVolumes().Get(ctx, id, metav1.GetOptions{}); err == nil {
		return nil // the sweep's next round gives it back
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("checking for PV %s: %w", id, err)
	}
	start := time.Now()
	err := r.Volumes.DeleteQuarantined(ctx, id)
	r.Metrics.Observe(metrics.Delete, start, metrics.Reason(err))
	if err != nil {
		return err
	}
	r.log.Infof("audit: deleted quarantined volume %s and its data: no PV and no claim referred to it for %s in quarantine", id, age.Round(time.Second))
	r.recorder.Eventf(r.nodeRef(), corev1.EventTypeNormal, ReasonOrphanDeleted,
		"Deleted volume %s and its data after %s in quarantine: no PV and no claim referred to it", id, age.Round(time.Second))
	return nil
}
