package capacity_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/placement"
	"source.plinth.dev/test/controllertest"
)

// TestHandedBackFromAFullNode: the scheduler places claims by the
// capacity nodes published, which can be behind (here, a file written
// beside node a's volumes, which its publisher would measure only at its
// next Poll). A claim placed on a node that then cannot hold it is handed
// back: the node removes the selected-node annotation and says so in an
// Event, and the scheduler places the pod again, on the node with room,
// though the pod prefers node a. An Immediate claim placed on the full
// node goes the same way: the admission server's placer puts it on the
// node that has room. A pod whose claim fits no node, and an Immediate
// claim that fits no node, wait unplaced until room is freed (the placer
// says why in a NotPlaced Event), and are placed where it was freed at
// once (the scheduler and the placer look again when a node publishes new
// figures, long before the ten-minute resync).
func TestHandedBackFromAFullNode(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	full := startNode(t, e, e.Node+"-a", "host-a-"+e.NS, 64*MiB)
	roomy := startNode(t, e, e.Node+"-b", "host-b-"+e.NS, 128*MiB)
	for _, n := range []*node{full, roomy} {
		waitCapacity(t, n, e.Class, available(t, n, volume.NoOvercommit))
	}
	stale, _ := published(t, e, full.env.Node, e.Class)
	if err := os.WriteFile(filepath.Join(full.env.Dir, "filler"), make([]byte, 40*MiB), 0o600); err != nil {
		t.Fatal(err)
	}
	if a := available(t, full, volume.NoOvercommit); a >= 32*MiB || stale.Capacity.Value() < 32*MiB {
		t.Fatalf("set-up: node a has %d bytes and published %s; want a 32 MiB claim to fit by the figure only", a, stale.Capacity)
	}

	// The pod prefers node a, whose published figure says the claim fits.
	preferA := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: names.TopologyKeyHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"host-a-" + e.NS}}}}}}}}
	}
	pvc := createPodWithClaim(t, e, "prefers-a", "32Mi", preferA)
	ev := e.WaitEvent(pvc.UID, "ProvisioningFailed", "the scheduler chooses a node again")
	if !strings.Contains(ev.Message, "on node "+full.env.Node+":") || !strings.Contains(ev.Message, "not enough space for volume") {
		t.Errorf("hand-back Event %q; want it to name node a and the missing space", ev.Message)
	}
	if pod := waitScheduled(t, e, "prefers-a"); pod.Spec.NodeName != roomy.env.Node {
		t.Fatalf("pod prefers-a is on %s, want %s (node a has no room for its claim)", pod.Spec.NodeName, roomy.env.Node)
	}
	bound, pv := e.WaitBound(pvc.Name)
	if n := bound.Annotations[ownership.AnnSelectedNode]; n != roomy.env.Node {
		t.Errorf("claim prefers-a is placed on %q, want %s", n, roomy.env.Node)
	}
	checkOnlyOn(t, pv.Name, roomy, full)

	// An Immediate claim that node a took while it had room.
	binding := storagev1.VolumeBindingImmediate
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: e.Class + "-now"}, Provisioner: names.DriverName, VolumeBindingMode: &binding}
	if _, err := e.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.StorageV1().StorageClasses().Delete(ctx, class.Name, metav1.DeleteOptions{}) })
	now := e.CreateClaim(controllertest.Claim{Name: "now", Size: "32Mi", Class: class.Name, Node: full.env.Node})
	e.WaitEvent(now.UID, "ProvisioningFailed", "another node with room may take it")
	e.WaitEvent(now.UID, placement.ReasonPlaced, "chose node "+roomy.env.Node+",")
	bound, pv = e.WaitBound(now.Name)
	if n := bound.Annotations[ownership.AnnSelectedNode]; n != roomy.env.Node {
		t.Errorf("claim now is placed on %q, want %s", n, roomy.env.Node)
	}
	checkOnlyOn(t, pv.Name, roomy, full)

	// A claim that fits neither node once a block volume takes node b's
	// room: its pod waits, unplaced, with the scheduler's reason; once the
	// block claim goes and node b publishes its room again, the scheduler
	// places the pod there, with no retry of the node's.
	filler := e.CreateClaim(controllertest.Claim{Name: "filler", Size: "100Mi", Mode: corev1.PersistentVolumeBlock, Node: roomy.env.Node})
	e.WaitBound(filler.Name)
	waits := createPodWithClaim(t, e, "waits", "64Mi")
	waitUnschedulable(t, e, "waits", "did not have enough free storage")
	// So does an Immediate claim: the placer finds no node with room.
	laterObj := e.ClaimObject(controllertest.Claim{Name: "later", Size: "32Mi", Class: class.Name})
	laterObj.Annotations = nil
	later, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, laterObj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.WaitEvent(later.UID, placement.ReasonNotPlaced, "no node has room")
	if got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, later.Name, metav1.GetOptions{}); err != nil || got.Annotations[ownership.AnnSelectedNode] != "" {
		t.Fatalf("Immediate claim later, which fits no node, is placed on %q (%v)", got.Annotations[ownership.AnnSelectedNode], err)
	}
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, filler.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{waits.Name, later.Name} {
		bound, pv = e.WaitBound(name)
		if n := bound.Annotations[ownership.AnnSelectedNode]; n != roomy.env.Node {
			t.Errorf("claim %s is placed on %q, want %s", name, n, roomy.env.Node)
		}
		checkOnlyOn(t, pv.Name, roomy, full)
	}
}

// TestUnenforcedHolds: a filesystem claim on the only node, which cannot
// enforce sizes and was not told to accept that, is handed back, and the
// scheduler, with nowhere else to go, places it there again (capacity is
// per class, not per volume mode). The node then holds it before the next
// hand-back, 10 s, then 20 s, and says so, so that node and scheduler do
// not trade writes at the scheduler's retry rate: in 25 s, at most two
// hand-backs. (Without the holds, a minute saw eight, at the scheduler's
// backoff of 1 s doubling to 10 s.)
func TestUnenforcedHolds(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	n := startNodeWith(t, e, e.Node+"-u", "host-u-"+e.NS, 64*MiB, func(p *controllertest.NodeProcess) {
		p.Args = slices.DeleteFunc(p.Args, func(a string) bool { return a == "--allow-unenforced-capacity" })
	})
	if n.env.Vols.CapacityEnforced() {
		t.Fatalf("set-up: the tmpfs at %s enforces project quotas; this test needs a node that cannot", n.env.Dir)
	}
	pvc := createPodWithClaim(t, e, "fs", "8Mi")
	e.WaitEvent(pvc.UID, "ProvisioningFailed", "the scheduler chooses a node again")
	start := time.Now()
	held := e.WaitEvent(pvc.UID, "ProvisioningFailed", "placed on this node again")
	if !strings.Contains(held.Message, "it stays here 10s, then is handed back again") {
		t.Errorf("hold Event %q; want the first hold, 10s", held.Message)
	}
	time.Sleep(25*time.Second - time.Since(start))
	var backs int32
	for _, ev := range e.Events(pvc.UID) {
		if strings.Contains(ev.Message, "no longer placed on this node") {
			backs += max(ev.Count, 1)
		}
	}
	if backs > 2 {
		t.Errorf("%d hand-backs in 25 s, want at most 2 (10 s, then 20 s held in between)", backs)
	}
	if pod, err := e.Client.CoreV1().Pods(e.NS).Get(context.Background(), "fs", metav1.GetOptions{}); err != nil || pod.Spec.NodeName != "" {
		t.Errorf("pod fs: node %q (%v); want it unscheduled, its claim has nowhere to go", pod.Spec.NodeName, err)
	}
}

// checkOnlyOn checks that volume id is on node on and not on node off.
func checkOnlyOn(t *testing.T, id string, on, off *node) {
	t.Helper()
	if ids := on.env.VolumeIDs(); !slices.Contains(ids, id) {
		t.Errorf("volume %s is not on node %s (its volumes: %v)", id, on.env.Node, ids)
	}
	if ids := off.env.VolumeIDs(); slices.Contains(ids, id) {
		t.Errorf("volume %s is on node %s too", id, off.env.Node)
	}
}
