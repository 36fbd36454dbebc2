package provisioner

// What the crash tests look at around a kill: what it interrupted
// (observe), and a kill placed in the middle of a deletion when chance
// placed none there (killMidDeletion).

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// observe records what a kill interrupted, with plinth-node dead and
// nothing on the disk moving: a volume without a PV (made, its PV not yet:
// the window that leaves an orphan if the claim goes too), a volume whose
// deletion is recorded but unfinished, or a released Delete PV whose data
// is gone or going while the PV is not yet deleted (both in the middle of a
// deletion), and a half-made volume. It returns the volumes without PV
// seen for the first time.
func (r *crashRun) observe(ctx context.Context) (fresh []string) {
	entries, err := r.e.Vols.List(ctx)
	if err != nil {
		return nil
	}
	pvs, err := r.nodePVs(ctx)
	if err != nil {
		return nil
	}
	whole := map[string]bool{}
	for _, en := range entries {
		switch {
		case en.Pending == volume.OpCreate:
			r.midCreate[en.ID] = true
		case en.Pending == volume.OpDelete:
			r.midDelete[en.ID] = true
		case en.Pending == "" && en.Problem == "":
			whole[en.ID] = true
			if pvs[en.ID] == nil && !r.unbacked[en.ID] {
				r.unbacked[en.ID] = true
				fresh = append(fresh, en.ID)
			}
		}
	}
	for name, pv := range pvs {
		if pv.Status.Phase == corev1.VolumeReleased && pv.DeletionTimestamp == nil &&
			pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete && !whole[name] {
			r.midDelete[name] = true
		}
	}
	return fresh
}

// nodePVs are the PVs of the env's node, by name.
func (r *crashRun) nodePVs(ctx context.Context) (map[string]*corev1.PersistentVolume, error) {
	list, err := r.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{ownership.LabelNode: ownership.NodeLabelValue(r.e.Node)}.String(),
	})
	if err != nil {
		return nil, err
	}
	pvs := map[string]*corev1.PersistentVolume{}
	for i := range list.Items {
		pvs[list.Items[i].Name] = &list.Items[i]
	}
	return pvs, nil
}

// killMidDeletion makes a kill land in the middle of a deletion when the
// random schedule caught none (it usually does; under TCG, with few
// deletions of bound claims, now and then it does not): it deletes bound
// claims a few at a time and kills plinth-node as soon as one's deletion
// is under way (its intent record written, or its data gone while its PV
// is still there), then restarts it. What the kill caught is recorded by
// observe, as for the schedule's kills.
func (r *crashRun) killMidDeletion(t *testing.T, p *controllertest.NodeProcess) {
	t.Helper()
	ctx := context.Background()
	marked := func(c *corev1.PersistentVolumeClaim) bool { _, ok := r.markers[c.UID]; return ok }
	for attempt := 0; attempt < 5 && len(r.midDelete) == 0; attempt++ {
		// The schedule marks bound claims every 10 operations, and may
		// have deleted every one it marked while the claims it made last
		// were still being bound: mark those as they are bound.
		for deadline := time.Now().Add(time.Minute); !slices.ContainsFunc(r.live, marked) && time.Now().Before(deadline); time.Sleep(time.Second) {
			r.mark(t)
		}
		var victims []string
		for range 4 {
			k := slices.IndexFunc(r.live, marked)
			if k < 0 {
				break
			}
			victims = append(victims, ownership.VolumeIDFor(r.live[k].UID))
			r.deleteClaim(t, k)
		}
		if len(victims) == 0 {
			t.Logf("no bound claim left to delete for a kill in the middle of a deletion")
			return
		}
		if r.deletionUnderWay(ctx, victims, 30*time.Second) {
			p.Kill(syscall.SIGKILL)
			r.kills++
			r.observe(ctx)
			if err := p.StartErr(); err != nil {
				t.Fatalf("restarting plinth-node: %v", err)
			}
		}
	}
	t.Logf("after deleting bound claims to kill plinth-node mid-deletion: %d deletions caught half done", len(r.midDelete))
}

// deletionUnderWay polls until one of the volumes ids is being deleted
// (its intent record says so, or its data is gone while its PV exists),
// and reports whether that happened within timeout.
func (r *crashRun) deletionUnderWay(ctx context.Context, ids []string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		entries, err := r.e.Vols.List(ctx)
		if err != nil {
			continue
		}
		present := map[string]bool{}
		for _, en := range entries {
			present[en.ID] = true
			if en.Pending == volume.OpDelete && slices.Contains(ids, en.ID) {
				return true
			}
		}
		finished := 0
		for _, id := range ids {
			if present[id] {
				continue
			}
			_, err := r.client.CoreV1().PersistentVolumes().Get(ctx, id, metav1.GetOptions{})
			switch {
			case err == nil:
				return true
			case apierrors.IsNotFound(err):
				finished++
			}
		}
		if finished == len(ids) {
			return false // all done before a look caught one
		}
	}
	return false
}
