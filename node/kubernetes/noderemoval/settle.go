package noderemoval

// Settling: the outcome the volumes of a removed node get.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// settle gives the volumes of removed node their outcome, and says whether
// any may need one later: one with reclaim policy Delete that is still
// there (bound, its claim may be deleted as the Event advises and the
// volume Released; released, its deletion failed now). A Retain volume
// has had all it will get from here once its claim has the Event.
func (s *sweep) settle(ctx context.Context, node string, vols []*corev1.PersistentVolume) (open bool) {
	for _, pv := range vols {
		deletable := pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete
		switch {
		case pv.Status.Phase == corev1.VolumeBound && pv.Spec.ClaimRef != nil:
			open = open || deletable
			if _, ok := s.announced[pv.UID]; ok {
				continue
			}
			s.announced[pv.UID] = node
			s.log.Warningf("claim %s/%s is bound to volume %s of removed node %s", pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, pv.Name, node)
			msg := fmt.Sprintf("node %s was removed from the cluster, and volume %s lives on it only: pods using this claim cannot run elsewhere. "+
				"If the machine returns under the same name, the claim works again with its data. Otherwise delete the pods and this claim, "+
				"and create a new claim: the data of this one is lost with the machine", node, pv.Name)
			s.recorder.Event(pv.Spec.ClaimRef, corev1.EventTypeWarning, ReasonNodeRemoved, msg)
			s.recorder.Event(pv, corev1.EventTypeWarning, ReasonNodeRemoved, msg)
		case pv.Status.Phase != corev1.VolumeReleased || !deletable:
			open = open || deletable
		default:
			// Preconditions: only this PV, as it was when listed.
			err := s.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &pv.UID, ResourceVersion: &pv.ResourceVersion},
			})
			if err != nil && !apierrors.IsNotFound(err) {
				s.log.Warningf("deleting released PV %s of removed node %s: %v", pv.Name, node, err)
				open = true
				continue
			}
			s.log.Infof("deleted released PV %s of removed node %s (its data stays on that machine until its plinth-node removes it as an orphan)", pv.Name, node)
			s.recorder.Eventf(pv, corev1.EventTypeNormal, ReasonNodeRemoved,
				"deleted: released, reclaim policy Delete, and its node %s was removed from the cluster", node)
		}
	}
	return open
}
