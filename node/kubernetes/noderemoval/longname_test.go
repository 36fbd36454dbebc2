package noderemoval

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
)

// TestRemovedLongNamedNodeFound: a node whose name (80 characters) is
// longer than a label value, so that its PVs' node label is a hash, is
// removed while no plinth-node watches (no CSINode deletion is seen).
// The node that becomes the actor finds it all the same, by the full name
// its PVs carry (ownership.AnnNodeName), and settles its volumes: a
// NodeRemoved Event on its bound claim, its Released Delete PV deleted.
// The long-named node's provisioner runs with its own node agent
// identity, so the admission policies admitted its PVs.
func TestRemovedLongNamedNodeFound(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	head := e.NS + "-gone.rack"
	gone := head + "." + strings.Repeat("x", 80-len(head)-1)
	if len(gone) != 80 || ownership.NodeLabelValue(gone) == gone {
		t.Fatalf("node name %q: want 80 characters and a hashed label", gone)
	}
	e.CreateNode(gone, e.NS+"-gone")
	base := testBase(e, gone)
	base.Client = controllertest.NodeAgentClient(t, gone)
	p, err := provisioner.New(provisioner.Config{Base: base, Volumes: controllertest.NewVolumes(t, t.TempDir(), true), Snapshots: e.Snapshots, OrphanGracePeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stopGone, _ := supervisor.TestHarness(t, p.Run)
	bound := e.CreateClaim(controllertest.Claim{Name: "bound", Node: gone})
	released := e.CreateClaim(controllertest.Claim{Name: "released", Node: gone})
	e.WaitBound(bound.Name)
	e.WaitBound(released.Name)
	// The volumes outlive the test unless settled below: a later test's
	// actor must not find this removed node's.
	boundPV, releasedPV := ownership.VolumeIDFor(bound.UID), ownership.VolumeIDFor(released.UID)
	t.Cleanup(func() {
		for _, name := range []string{boundPV, releasedPV} {
			_, _ = e.Client.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = e.Client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	stopGone()
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, released.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "the PV of the deleted claim Released", func() (bool, error) {
		pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, releasedPV, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeReleased, err
	})
	if err := e.Client.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	survivor := testBase(e, e.Node)
	survivor.Client = controllertest.NodeAgentClient(t, e.Node)
	c, err := New(Config{Base: survivor, GracePeriod: 2 * time.Second, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	supervisor.TestHarness(t, c.Run)
	ev := e.WaitEvent(bound.UID, ReasonNodeRemoved, gone)
	t.Logf("claim %s: %s", bound.Name, ev.Message)
	// The bound claim deleted, as the Event advises, its PV is Released
	// and goes too.
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, bound.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{releasedPV, boundPV} {
		controllertest.Eventually(t, 30*time.Second, "the released Delete PV "+name+" of the removed node deleted", func() (bool, error) {
			_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
}
