package provisioner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/controllertest"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/volume/volumetest"
)

func TestPlacementDelay(t *testing.T) {
	differ := false
	for i := range 50 {
		uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		a, b := placementDelay(uid, "node-a"), placementDelay(uid, "node-b")
		if a < 0 || a >= maxPlacementDelay || b < 0 || b >= maxPlacementDelay {
			t.Fatalf("delays %s, %s outside [0, %s)", a, b, maxPlacementDelay)
		}
		if a != placementDelay(uid, "node-a") {
			t.Fatalf("delay of one claim and node changed between calls")
		}
		differ = differ || a < b
	}
	if !differ {
		t.Errorf("node-a never came before node-b in 50 claims: the order does not vary with the claim")
	}
}

// TestImmediateClaimsArePlaced runs two plinth-node processes (nodes with
// Node objects, data directories side by side) against classes that bind
// immediately. A claim of a class whose allowedTopologies name one node's
// hostname is provisioned there; claims of a class without topology are
// each provisioned exactly once, by one node, which says so in a
// PlacedOnNode Event, and the other node holds no volume for them; a
// claim of a class whose topology names no node, and a claim of a
// WaitForFirstConsumer class that no scheduler placed, stay unplaced.
// Node b refuses filesystem volumes where it cannot enforce their size
// (the host), so there it takes only the block claim its class names it
// for, and node a all the others.
func TestImmediateClaimsArePlaced(t *testing.T) {
	a := newEnv(t, true)
	bEnv := *a.Env
	b := &env{Env: &bEnv}
	b.Node = a.Node + "-b"
	parent := t.TempDir()
	var procs []*controllertest.NodeProcess
	for _, e := range []*env{a, b} {
		e.Dir = filepath.Join(parent, e.Node)
		e.Vols = controllertest.NewVolumes(t, e.Dir, true)
		e.CreateNode(e.Node, e.Node)
		p := e.NodeProcess(t)
		if e == b {
			// Node b refuses filesystem volumes where their size is not
			// enforced (the host), so it must not take such claims.
			p.Args = slices.DeleteFunc(p.Args, func(a string) bool { return a == "--allow-unenforced-capacity" })
		}
		p.Start()
		t.Cleanup(func() {
			p.Kill(syscall.SIGTERM)
			if t.Failed() {
				t.Logf("plinth-node %s log (tail):\n%s", e.Node, p.LogTail())
			}
		})
		procs = append(procs, p)
	}
	// Both nodes watch before the first claim exists, so both offer
	// themselves for every claim and the conditional patch decides.
	for _, p := range procs {
		if !p.WaitLogged(provisionerStarted, 0, time.Minute, nil) {
			t.Fatalf("a provisioner did not start within a minute")
		}
	}
	ctx := context.Background()
	immediateClass := func(name string, hosts ...string) string {
		t.Helper()
		a.CreateImmediateClass(a.Class+"-"+name, hosts...)
		return a.Class + "-" + name
	}
	// A claim as a user creates it: no annotation (the PV controller adds
	// the provisioner's; no scheduler adds a node).
	create := func(name, class string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
		t.Helper()
		obj := a.ClaimObject(controllertest.Claim{Name: name, Class: class, Size: "1Mi", Mode: mode})
		obj.Annotations = nil
		pvc, err := a.Client.CoreV1().PersistentVolumeClaims(a.NS).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pvc
	}

	fsMode, blockMode := corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock
	onB := create("on-b", immediateClass("b", b.Node), blockMode)
	nowhere := create("nowhere", immediateClass("nowhere", "no-such-node"), fsMode)
	waiting := create("waiting", a.Class, fsMode) // WaitForFirstConsumer
	anyClass := immediateClass("any")
	var anywhere []*corev1.PersistentVolumeClaim
	for i := range 8 {
		anywhere = append(anywhere, create(fmt.Sprintf("any-%d", i), anyClass, fsMode))
	}
	bRefusesFilesystems := !b.Vols.CapacityEnforced()

	// holder waits for claim name to be Bound and returns the node its
	// PV is on, after checking the Event and that only that node holds
	// a volume for it.
	holder := func(pvc *corev1.PersistentVolumeClaim) string {
		t.Helper()
		bound, pv := a.WaitBound(pvc.Name)
		node := bound.Annotations[ownership.AnnSelectedNode]
		if node != a.Node && node != b.Node {
			t.Fatalf("claim %s bound with selected node %q", pvc.Name, node)
		}
		ev := a.WaitEvent(pvc.UID, ReasonPlaced, "node "+node+" took the claim")
		if ev.Source.Host != "" && ev.Source.Host != node {
			t.Errorf("claim %s: the PlacedOnNode Event comes from %s, the claim is on %s", pvc.Name, ev.Source.Host, node)
		}
		terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || !slices.Equal(terms[0].MatchExpressions[0].Values, []string{node}) {
			t.Errorf("claim %s on %s: PV node affinity %+v", pvc.Name, node, terms)
		}
		id := ownership.VolumeIDFor(pvc.UID)
		for _, e := range []*env{a, b} {
			if has := slices.Contains(e.VolumeIDs(), id); has != (e.Node == node) {
				t.Errorf("claim %s placed on %s: node %s holds its volume: %v", pvc.Name, node, e.Node, has)
			}
		}
		return node
	}
	if n := holder(onB); n != b.Node {
		t.Errorf("claim of a class allowing only %s was placed on %s", b.Node, n)
	}
	count := map[string]int{}
	for _, pvc := range anywhere {
		count[holder(pvc)]++
	}
	t.Logf("claims of a class without topology, by node: %v", count)
	if bRefusesFilesystems && count[b.Node] != 0 {
		t.Errorf("node %s, which refuses filesystem volumes, took %d filesystem claims", b.Node, count[b.Node])
	}

	// A claim no node can serve as it is: one node takes it all the same
	// and says why, once, as for a claim placed on it; it gets no volume.
	rwxObj := a.ClaimObject(controllertest.Claim{Name: "rwx", Class: anyClass, Size: "1Mi", Access: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}})
	rwxObj.Annotations = nil
	rwx, err := a.Client.CoreV1().PersistentVolumeClaims(a.NS).Create(ctx, rwxObj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.WaitEvent(rwx.UID, ReasonProvisioningFailed, `access mode "ReadWriteMany" is not supported`)

	// The claims no node may take: still unplaced a while after the
	// others were all provisioned (every node's delay is under a second).
	time.Sleep(2 * maxPlacementDelay)
	for _, pvc := range []*corev1.PersistentVolumeClaim{nowhere, waiting} {
		got, err := a.Client.CoreV1().PersistentVolumeClaims(a.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := got.Annotations[ownership.AnnSelectedNode]; ok || got.Spec.VolumeName != "" {
			t.Errorf("claim %s was placed on %q (volume %q); no node may take it", pvc.Name, n, got.Spec.VolumeName)
		}
		a.NoPV(pvc.UID)
	}
	got, err := a.Client.CoreV1().PersistentVolumeClaims(a.NS).Get(ctx, rwx.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	placedOn := got.Annotations[ownership.AnnSelectedNode]
	if placedOn != a.Node && placedOn != b.Node {
		t.Errorf("invalid claim placed on %q, want one of the nodes", placedOn)
	}
	for _, ev := range a.Events(rwx.UID) {
		if ev.Reason == ReasonProvisioningFailed && ev.Source.Host != "" && ev.Source.Host != placedOn {
			t.Errorf("node %s reported the invalid claim placed on %s: %q", ev.Source.Host, placedOn, ev.Message)
		}
	}
	a.NoPV(rwx.UID)
}

// TestPlacingSeesWaitingClaims: a node does not offer itself for
// an Immediate claim when the room it has is promised to claims already
// placed on it that have no volume yet, which the accounting does not
// show taken: here a claim the scheduler placed whose class does not
// exist yet. Offering anyway would leave one of the two without room on
// this node, to fail and be handed back (TestHandBack). Once the room is
// freed, the node offers itself and the claim is placed and bound.
func TestPlacingSeesWaitingClaims(t *testing.T) {
	e := newEnv(t, true)
	e.Dir = volumetest.Tmpfs(t, 64<<20)
	e.Vols = controllertest.NewVolumes(t, e.Dir, true)
	e.CreateNode(e.Node, e.Node)
	p := e.NodeProcess(t)
	p.Run()
	if !p.WaitLogged(provisionerStarted, 0, time.Minute, nil) {
		t.Fatalf("the provisioner did not start within a minute")
	}
	ctx := context.Background()
	later := e.Class + "-later"
	waiting := e.CreateClaim(controllertest.Claim{Name: "waiting", Class: later, Size: "40Mi", Mode: corev1.PersistentVolumeBlock})
	e.WaitEvent(waiting.UID, ReasonProvisioningFailed, "not found")

	now := e.Class + "-now"
	e.CreateImmediateClass(now)
	obj := e.ClaimObject(controllertest.Claim{Name: "now", Class: now, Size: "32Mi", Mode: corev1.PersistentVolumeBlock})
	obj.Annotations = nil
	claim, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unplaced := func(when string) {
		t.Helper()
		time.Sleep(2*maxPlacementDelay + time.Second)
		got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := got.Annotations[ownership.AnnSelectedNode]; ok {
			t.Errorf("%s: the 32Mi Immediate claim was placed on %q beside a 40Mi claim waiting on a 64Mi data filesystem", when, n)
		}
		e.NoPV(claim.UID)
	}
	unplaced("while the waiting claim has no class")
	e.CreateClass(later, corev1.PersistentVolumeReclaimDelete, nil)
	e.WaitBound(waiting.Name)
	unplaced("once the waiting claim has its volume")

	// The waiting claim goes, and its volume with it: the room it frees
	// makes the node offer itself for the Immediate claim at once (well
	// before the ten-minute resync), which is then placed here and bound.
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, waiting.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pvc, _ := e.WaitBound(claim.Name)
	if n := pvc.Annotations[ownership.AnnSelectedNode]; n != e.Node {
		t.Errorf("the Immediate claim was placed on %q, want %q", n, e.Node)
	}
	t.Logf("the Immediate claim was bound %.1fs after the waiting claim was deleted", time.Since(start).Seconds())
}
