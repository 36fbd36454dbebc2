package noderemoval

// Controller tests against a real etcd + kube-apiserver +
// kube-controller-manager (controllertest): a provisioner of node "gone"
// makes and binds real volumes, the node then stops and its Node object is
// deleted (the garbage collector deletes its CSINode with it, as in a
// cluster), and the controller under test runs as a surviving node, with
// a node agent's own identity, so that the API server's audit log shows
// every request it made.

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
)

func TestMain(m *testing.M) { controllertest.Main(m) }

// TestRemovedNodeClaims: while the gone node's Node object exists, nothing
// happens; once it has been deleted for the grace period, its bound claim
// gets a Warning NodeRemoved naming the node, and its released Delete PV is
// deleted, while a Retain PV and the survivor's own claim are untouched. A
// lower-named node running the driver takes the job over.
//
// Its cost: a PV list of every Plinth volume only when the node becomes
// the actor (twice here: at its start, and when the lower node goes
// down), and otherwise lists of a removed node's PVs alone, over tens of
// looks.
func TestRemovedNodeClaims(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	gone := e.Node + "-gone"
	createCSINode(t, e, createNode(t, e, gone))
	// The survivor has no Node object (a node whose kubelet has not
	// registered): it must still never treat itself as removed.
	e.CreateClass(e.Class+"-retain", corev1.PersistentVolumeReclaimRetain, nil)

	// The gone node's volumes, and one of the survivor's.
	stopGone := startProvisioner(t, e, gone, t.TempDir())
	startProvisioner(t, e, e.Node, e.Dir)
	bound := e.CreateClaim(controllertest.Claim{Name: "bound", Node: gone})
	released := e.CreateClaim(controllertest.Claim{Name: "released", Node: gone})
	retained := e.CreateClaim(controllertest.Claim{Name: "retained", Node: gone, Class: e.Class + "-retain"})
	mine := e.CreateClaim(controllertest.Claim{Name: "mine"})
	for _, c := range []string{"bound", "released", "retained", "mine"} {
		e.WaitBound(c)
	}
	// The node dies; its claims "released" and "retained" are deleted
	// meanwhile, so their PVs are Released with nobody to delete them.
	stopGone()
	for _, c := range []string{"released", "retained"} {
		if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, c, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	controllertest.Eventually(t, 30*time.Second, "the PVs of the deleted claims Released", func() (bool, error) {
		for _, c := range []*corev1.PersistentVolumeClaim{released, retained} {
			pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(c.UID), metav1.GetOptions{})
			if err != nil || pv.Status.Phase != corev1.VolumeReleased {
				return false, err
			}
		}
		return true, nil
	})

	base := testBase(e, e.Node)
	base.Client = controllertest.NodeAgentClient(t, e.Node)
	c, err := New(Config{Base: base, GracePeriod: 2 * time.Second, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	supervisor.TestHarness(t, c.Run)
	// The Node object is still there: nothing happens.
	time.Sleep(3 * time.Second)
	if evs := eventsOf(e, bound, ReasonNodeRemoved); len(evs) > 0 {
		t.Fatalf("claim of a node that still has its Node object got %s: %q", ReasonNodeRemoved, evs)
	}
	if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(released.UID), metav1.GetOptions{}); err != nil {
		t.Fatalf("released PV of a node that still exists: %v", err)
	}

	if err := e.Client.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	ev := e.WaitEvent(bound.UID, ReasonNodeRemoved, gone)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("%s Event is of type %s, want Warning", ReasonNodeRemoved, ev.Type)
	}
	t.Logf("claim %s: %s %.1fs after its node's deletion (grace 2s): %s", bound.Name, ReasonNodeRemoved, time.Since(deleted).Seconds(), ev.Message)
	if took := time.Since(deleted); took < 2*time.Second {
		t.Errorf("%s came %s after the Node's deletion, before the grace period of 2s", ReasonNodeRemoved, took)
	}
	controllertest.Eventually(t, 30*time.Second, "the released Delete PV of the removed node deleted", func() (bool, error) {
		_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(released.UID), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	time.Sleep(time.Second) // a few more looks
	for _, c := range []*corev1.PersistentVolumeClaim{retained, bound} {
		if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(c.UID), metav1.GetOptions{}); err != nil {
			t.Errorf("PV of claim %s: %v, want it kept", c.Name, err)
		}
	}
	if evs := eventsOf(e, mine, ReasonNodeRemoved); len(evs) > 0 {
		t.Errorf("the survivor's own claim got %s: %q", ReasonNodeRemoved, evs)
	}
	if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(mine.UID), metav1.GetOptions{}); err != nil {
		t.Errorf("the survivor's own PV: %v", err)
	}
	if n := len(eventsOf(e, bound, ReasonNodeRemoved)); n != 1 {
		t.Errorf("claim %s has %d %s Events, want 1 (one actor, once)", bound.Name, n, ReasonNodeRemoved)
	}
	checkPVLists(t, e.Node, time.Since(started), c.Interval, 1, gone)

	// A node of lower name that runs the driver and is Ready is the actor
	// from now on: a second removed node's claim is left to it. While it
	// is not Ready (powered off, its CSINode still there), the survivor
	// acts.
	lower := "a-" + e.Node
	if _, err := e.Client.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: lower},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: names.DriverName, NodeID: lower}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.StorageV1().CSINodes().Delete(ctx, lower, metav1.DeleteOptions{}) })
	createNode(t, e, lower)
	setReady(t, e, lower, corev1.ConditionTrue)
	gone2 := e.Node + "-gone2"
	createCSINode(t, e, createNode(t, e, gone2))
	stop2 := startProvisioner(t, e, gone2, t.TempDir())
	other := e.CreateClaim(controllertest.Claim{Name: "other", Node: gone2})
	e.WaitBound("other")
	stop2()
	if err := e.Client.CoreV1().Nodes().Delete(ctx, gone2, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if evs := eventsOf(e, other, ReasonNodeRemoved); len(evs) > 0 {
		t.Errorf("a node that is not the actor reported a removed node: %q", evs)
	}
	setReady(t, e, lower, corev1.ConditionUnknown)
	e.WaitEvent(other.UID, ReasonNodeRemoved, gone2)
	// Becoming the actor again, the survivor found gone2, whose CSINode
	// was deleted while it was not the actor, by one more full list.
	checkPVLists(t, e.Node, time.Since(started), c.Interval, 2, gone, gone2)
}

// checkPVLists checks the PV lists node's identity made in elapsed, at
// one look each interval: full lists (every Plinth PV) as many as terms
// as the actor, and besides only lists of the PVs of the removed nodes.
func checkPVLists(t *testing.T, node string, elapsed, interval time.Duration, terms int, removed ...string) {
	t.Helper()
	selected := map[string]string{ownership.LabelNode: "full"}
	for _, r := range removed {
		selected[labels.SelectorFromSet(labels.Set{ownership.LabelNode: ownership.NodeLabelValue(r)}).String()] = r
	}
	got := map[string]int{}
	for _, c := range controllertest.NodeCalls(t, node) {
		if c.Verb != "list" || c.ObjectRef == nil || c.ObjectRef.Resource != "persistentvolumes" {
			continue
		}
		u, err := url.Parse(c.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		what, ok := selected[u.Query().Get("labelSelector")]
		if !ok {
			t.Errorf("node %s listed PVs with %s, which is neither every Plinth PV nor a removed node's", node, c.RequestURI)
			continue
		}
		got[what]++
	}
	t.Logf("PV lists in %.1fs (about %d looks): %v", elapsed.Seconds(), int(elapsed/interval), got)
	if got["full"] != terms {
		t.Errorf("node %s listed every Plinth PV %d times in %d terms as the actor, want once a term", node, got["full"], terms)
	}
	for _, r := range removed {
		if got[r] == 0 {
			t.Errorf("node %s never listed the PVs of removed node %s", node, r)
		}
	}
}

// TestActorsAreFew: a node that is not among the lowest-named nodes
// running the driver makes no Node reads to choose the actor (and never
// acts), however many nodes of lower name there are and whatever their
// state; a candidate does read them, which shows that the reads are
// counted.
func TestActorsAreFew(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	var lower []string
	for i := range candidateCount {
		// No Node objects: to a candidate none of these is Ready.
		name := fmt.Sprintf("a-%s-%02d", e.Node, i)
		createCSINode(t, e, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		lower = append(lower, name)
	}
	candidate := lower[len(lower)-1]
	for _, node := range []string{e.Node, candidate} {
		base := testBase(e, node)
		base.Client = controllertest.NodeAgentClient(t, node)
		c, err := New(Config{Base: base, GracePeriod: time.Hour, Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		supervisor.TestHarness(t, c.Run)
	}
	time.Sleep(3 * time.Second) // about 15 looks
	reads := func(node string) (nodeGets, pvLists int) {
		for _, c := range controllertest.NodeCalls(t, node) {
			switch {
			case c.ObjectRef == nil:
			case c.ObjectRef.Resource == "nodes" && c.Verb == "get":
				nodeGets++
			case c.ObjectRef.Resource == "persistentvolumes" && c.Verb == "list":
				pvLists++
			}
		}
		return nodeGets, pvLists
	}
	gets, lists := reads(e.Node)
	t.Logf("node %s (not a candidate): %d Node reads, %d PV lists", e.Node, gets, lists)
	if gets != 0 || lists != 0 {
		t.Errorf("node %s, not among the %d lowest names, made %d Node reads and %d PV lists, want none", e.Node, candidateCount, gets, lists)
	}
	gets, lists = reads(candidate)
	t.Logf("node %s (the highest candidate): %d Node reads, %d PV lists", candidate, gets, lists)
	if gets < candidateCount-1 {
		t.Errorf("candidate %s made %d Node reads, want at least one look's %d (the control that reads are counted)", candidate, gets, candidateCount-1)
	}
	if lists != 1 {
		t.Errorf("candidate %s, the actor, listed PVs %d times, want once (on becoming the actor)", candidate, lists)
	}
}

// setReady sets the Ready condition of Node name, as its kubelet (True)
// or the node lifecycle controller (Unknown, once heartbeats stop) would.
func setReady(t *testing.T, e *controllertest.Env, name string, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	// The node lifecycle controller writes new Nodes too.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := e.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		_, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func createNode(t *testing.T, e *controllertest.Env, name string) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.TopologyKeyHostname: name}}}
	made, err := e.Client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return made
}

// createCSINode creates node's CSINode listing our driver as its kubelet
// does: owned by the Node (when node has a UID, that is, exists), so that
// the garbage collector deletes it with the Node.
func createCSINode(t *testing.T, e *controllertest.Env, node *corev1.Node) {
	t.Helper()
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: names.DriverName, NodeID: node.Name}}},
	}
	if node.UID != "" {
		csiNode.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	}
	if _, err := e.Client.StorageV1().CSINodes().Create(context.Background(), csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.StorageV1().CSINodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
}

// testBase is the controller configuration of these tests for node.
func testBase(e *controllertest.Env, node string) controller.Base {
	return controller.Base{Client: e.Client, Driver: names.DriverName, NodeName: node,
		RetryBase: controllertest.RetryBase, RetryMax: controllertest.RetryMax}
}

// startProvisioner runs a provisioner for node over the data directory dir
// until the test ends or stop is called.
func startProvisioner(t *testing.T, e *controllertest.Env, node, dir string) (stop func()) {
	t.Helper()
	p, err := provisioner.New(provisioner.Config{Base: testBase(e, node), Volumes: controllertest.NewVolumes(t, dir, true), Snapshots: e.Snapshots, OrphanGracePeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stop, _ = supervisor.TestHarness(t, p.Run)
	return stop
}

// eventsOf returns the messages of claim's Events of reason.
func eventsOf(e *controllertest.Env, claim *corev1.PersistentVolumeClaim, reason string) []string {
	var out []string
	for _, ev := range e.Events(claim.UID) {
		if ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out
}
