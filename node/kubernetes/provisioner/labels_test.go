package provisioner

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// userClaim creates a claim of e's class as a user does (no annotations)
// and places it on e's node as the scheduler does (the selected-node
// annotation, which the claim labels do not match yet: the claim does not
// ask Plinth's driver until the PV controller says so).
func userClaim(t *testing.T, e *env, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	obj := e.ClaimObject(controllertest.Claim{Name: name})
	obj.Annotations = nil
	made, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim %s: %v", name, err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + ownership.AnnSelectedNode + `":"` + e.Node + `"}}}`)
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("placing claim %s: %v", name, err)
	}
	return made
}

// TestClaimsWaitForTheLabelWriter: while the admission server that labels
// claims is down, a user's claim waits, with the PV controller's Warning
// naming the webhook, and unlabelled, so no node hears of it; once the
// server is back, the PV controller's next try labels it and its node
// provisions it.
func TestClaimsWaitForTheLabelWriter(t *testing.T) {
	e := newEnv(t, true)
	e.start(e.controller())
	cp := controllertest.ControlPlane(t)
	if err := cp.StopAdmission(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.StartAdmission() })

	claim := userClaim(t, e, "waits")
	ev := e.WaitEvent(claim.UID, "ProvisioningFailed", clusterobjects.ClaimLabelsCheckName)
	t.Logf("while the writer is down: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("the claim's Event is of type %s, want Warning", ev.Type)
	}
	got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Labels[ownership.LabelNode]; ok || got.Spec.VolumeName != "" {
		t.Fatalf("while the writer is down the claim has label %q and volume %q; want neither", v, got.Spec.VolumeName)
	}

	if err := cp.StartAdmission(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	bound, _ := e.WaitBound(claim.Name)
	t.Logf("bound %.1f s after the writer came back (the test's PV controller syncs every 2 s)", time.Since(back).Seconds())
	if v := bound.Labels[ownership.LabelNode]; v != ownership.NodeLabelValue(e.Node) {
		t.Errorf("the bound claim is labelled %q, want %q", v, ownership.NodeLabelValue(e.Node))
	}
}

// TestUpgradeLabelsExistingClaims: a claim written before the claim labels
// were registered (a cluster of an earlier version) carries no label, and
// a node of this version does not hear of it; once they are registered,
// the admission server's backfill, with its own identity, labels it, and
// the node provisions it. A second backfill finds nothing to label.
func TestUpgradeLabelsExistingClaims(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	cp := controllertest.ControlPlane(t)
	hooks := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := hooks.Delete(ctx, clusterobjects.ClaimLabelsWebhookName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.RegisterClaimLabels(ctx) })
	// The API server's admission sees the deletion within a second or so.
	controllertest.Eventually(t, 30*time.Second, "a claim written without its label", func() (bool, error) {
		probe := e.CreateClaim(controllertest.Claim{Name: "probe-" + time.Now().Format("150405.000000")})
		_, labelled := probe.Labels[ownership.LabelNode]
		return !labelled, e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, probe.Name, metav1.DeleteOptions{})
	})

	old := e.CreateClaim(controllertest.Claim{Name: "from-before"})
	e.start(e.controller())
	time.Sleep(3 * time.Second)
	if got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, old.Name, metav1.GetOptions{}); err != nil || got.Spec.VolumeName != "" {
		t.Fatalf("a node heard of an unlabelled claim: volume %q (%v)", got.Spec.VolumeName, err)
	}

	if err := cp.RegisterClaimLabels(ctx); err != nil {
		t.Fatal(err)
	}
	// The backfill's writes go through the registered labels; wait for
	// the API server to call them, as for the deletion.
	var n int
	controllertest.Eventually(t, 30*time.Second, "the backfill labelling the claim", func() (bool, error) {
		var err error
		n, err = admission.LabelClaims(ctx, cp.AdmissionClient())
		if err != nil {
			return false, err
		}
		got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, old.Name, metav1.GetOptions{})
		return err == nil && got.Labels[ownership.LabelNode] == ownership.NodeLabelValue(e.Node), err
	})
	t.Logf("the backfill labelled %d claims", n)
	e.WaitBound(old.Name)
	if again, err := admission.LabelClaims(ctx, cp.AdmissionClient()); err != nil || again != 0 {
		t.Errorf("a second backfill labelled %d claims (%v); want none", again, err)
	}
}
