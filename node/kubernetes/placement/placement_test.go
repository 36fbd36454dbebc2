package placement_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/placement"
	"source.plinth.dev/test/controllertest"
)

// TestMain starts kube-scheduler too, for the test of restores with the
// scheduler (scheduler_test.go); the placer's other tests make no pods.
func TestMain(m *testing.M) { os.Exit(controllertest.Tests(m, controllertest.WithScheduler()).Run()) }

// The tests below run against the test control plane's admission server,
// whose placer is the one under test (test/launch runs it as
// admission-serve does). The nodes are Node objects and the capacity
// objects a plinth-node would publish for them, written by the test: the
// placer reads nothing else of a node.

// fleet registers n nodes named <prefix>-<i>, each publishing room for
// class.
func fleet(e *controllertest.Env, prefix, class string, room []string) []string {
	e.T.Helper()
	var nodes []string
	for i, r := range room {
		node := fmt.Sprintf("%s-%03d", prefix, i)
		e.CreateNode(node, node)
		publish(e, node, class, r)
		nodes = append(nodes, node)
	}
	return nodes
}

// publish writes node's capacity for class, as its plinth-node would.
func publish(e *controllertest.Env, node, class, room string) {
	e.T.Helper()
	ctx := context.Background()
	n, err := e.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	q := resource.MustParse(room)
	c := &storagev1.CSIStorageCapacity{
		ObjectMeta: metav1.ObjectMeta{
			Name: "cap-" + node + "-" + class, Namespace: e.NS,
			Labels:          map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}},
		},
		StorageClassName: class,
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{names.TopologyKeyHostname: node}},
		Capacity:         &q,
	}
	caps := e.Client.StorageV1().CSIStorageCapacities(e.NS)
	if old, err := caps.Get(ctx, c.Name, metav1.GetOptions{}); err == nil {
		old.Capacity = &q
		_, err = caps.Update(ctx, old, metav1.UpdateOptions{})
		if err != nil {
			e.T.Fatalf("updating capacity of %s: %v", node, err)
		}
		return
	}
	if _, err := caps.Create(ctx, c, metav1.CreateOptions{}); err != nil {
		e.T.Fatalf("publishing capacity of %s: %v", node, err)
	}
}

// userClaim creates a claim as a user writes one: a class and a size,
// nothing else; the PV controller then marks it as the driver's.
func userClaim(e *controllertest.Env, name, class, size string) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	return createClaimObject(e, userClaimObject(e, name, class, size))
}

// userClaimObject is the claim userClaim creates.
func userClaimObject(e *controllertest.Env, name, class, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// createClaimObject creates pvc in the env's namespace.
func createClaimObject(e *controllertest.Env, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	made, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), pvc, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating claim %s: %v", pvc.Name, err)
	}
	return made
}

// placedOn waits until claim name is placed on a node other than the
// ones in not, and returns it.
func placedOn(e *controllertest.Env, name string, not ...string) string {
	e.T.Helper()
	var node string
	controllertest.Eventually(e.T, 30*time.Second, "claim "+name+" placed", func() (bool, error) {
		pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = pvc.Annotations[ownership.AnnSelectedNode]
		for _, n := range not {
			if node == n {
				return false, nil
			}
		}
		return node != "", nil
	})
	return node
}

// writesTo counts the writes (create, update, patch) user made to the
// claim name of namespace ns, by the API server's audit log.
func writesTo(t *testing.T, user, ns, name string) int {
	t.Helper()
	events, err := controllertest.ControlPlane(t).AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range events {
		o := ev.ObjectRef
		if ev.User.Username != user || o == nil || o.Resource != "persistentvolumeclaims" || o.Namespace != ns || o.Name != name {
			continue
		}
		if ev.Verb == "create" || ev.Verb == "update" || ev.Verb == "patch" {
			n++
		}
	}
	return n
}

// TestPlacementIsOneWritePerClaim: with a hundred nodes of equal room,
// fifty claims of an Immediate class created at once are each placed by
// one write of the placer, with a PlacedOnNode Event, on fifty different
// nodes (the room it promised one node counts until the node's figures
// show it), and no node agent writes any of them.
func TestPlacementIsOneWritePerClaim(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	class := "imm-" + e.NS
	e.CreateImmediateClass(class)
	room := make([]string, 100)
	for i := range room {
		room[i] = "10Gi"
	}
	fleet(e, e.NS, class, room)
	var claims []*corev1.PersistentVolumeClaim
	for i := range 50 {
		claims = append(claims, userClaim(e, fmt.Sprintf("c%02d", i), class, "6Gi"))
	}
	used := map[string]string{}
	for _, c := range claims {
		node := placedOn(e, c.Name)
		if other, ok := used[node]; ok {
			t.Errorf("claims %s and %s are both placed on node %s, which has room for one of them", other, c.Name, node)
		}
		used[node] = c.Name
		e.WaitEvent(c.UID, placement.ReasonPlaced, node)
	}
	for _, c := range claims {
		if n := writesTo(t, clusterobjects.AdmissionUser, e.NS, c.Name); n != 1 {
			t.Errorf("the admission server wrote claim %s %d times; want 1, its placement", c.Name, n)
		}
		for node := range used {
			if n := writesTo(t, clusterobjects.NodeAgentUser(node), e.NS, c.Name); n != 0 {
				t.Errorf("node agent %s wrote claim %s %d times; want none", node, c.Name, n)
			}
		}
	}
}

// TestPlacementKeepsWithinRoom: a burst of claims fills the nodes no
// further than their published room, though the figures do not change
// while it is placed; the claim no node has room for waits with a
// NotPlaced Event, and is placed as soon as a node publishes room for it.
// The class's topology is kept too.
func TestPlacementKeepsWithinRoom(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	class := "imm-" + e.NS
	e.CreateImmediateClass(class)
	nodes := fleet(e, e.NS, class, []string{"10Gi", "9Gi"})
	var claims []*corev1.PersistentVolumeClaim
	for i := range 5 {
		claims = append(claims, userClaim(e, fmt.Sprintf("c%d", i), class, "4Gi"))
	}
	count := map[string]int{}
	var waiting *corev1.PersistentVolumeClaim
	controllertest.Eventually(t, 30*time.Second, "four claims placed", func() (bool, error) {
		count, waiting = map[string]int{}, nil
		for _, c := range claims {
			pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), c.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if n := pvc.Annotations[ownership.AnnSelectedNode]; n != "" {
				count[n]++
			} else {
				waiting = pvc
			}
		}
		return count[nodes[0]]+count[nodes[1]] == 4, nil
	})
	if count[nodes[0]] != 2 || count[nodes[1]] != 2 {
		t.Errorf("4 GiB claims placed %v; want two on each node (10 and 9 GiB of room)", count)
	}
	e.WaitEvent(waiting.UID, placement.ReasonNotPlaced, "no node has room")
	time.Sleep(2 * time.Second)
	if got := placedNode(t, e, waiting.Name); got != "" {
		t.Fatalf("claim %s, for which no node has room, is placed on %s", waiting.Name, got)
	}
	publish(e, nodes[1], class, "20Gi")
	if got := placedOn(e, waiting.Name); got != nodes[1] {
		t.Errorf("claim %s placed on %s once %s published room; want there", waiting.Name, got, nodes[1])
	}

	// Two more nodes, the class's topology admitting the smaller alone.
	fenced, prefix := "fenced-"+e.NS, e.NS+"-f"
	e.CreateImmediateClass(fenced, prefix+"-000")
	small := fleet(e, prefix, fenced, []string{"1Gi", "50Gi"})[0]
	c := userClaim(e, "fenced", fenced, "100Mi")
	if got := placedOn(e, c.Name); got != small {
		t.Errorf("claim of a class whose topology admits %s alone placed on %s", small, got)
	}
}

func placedNode(t *testing.T, e *controllertest.Env, name string) string {
	t.Helper()
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc.Annotations[ownership.AnnSelectedNode]
}

// handBack removes the claim's placement as node's provisioner does when
// the node cannot hold it after all, with the node's own identity.
func handBack(t *testing.T, e *controllertest.Env, node, name string) {
	t.Helper()
	client := controllertest.NodeAgentClient(t, node)
	pvc, err := client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pvc.ResourceVersion,
		"annotations":     map[string]any{ownership.AnnSelectedNode: nil},
	}})
	if _, err := client.CoreV1().PersistentVolumeClaims(e.NS).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("node %s handing back claim %s: %v", node, name, err)
	}
}

// TestPlacementPassesOverHandBacks: a claim handed back is placed on
// another node, never again on one that handed it back while another
// remains; when every node has handed it back, it waits with a NotPlaced
// Event, and is tried again after a while.
func TestPlacementPassesOverHandBacks(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	class := "imm-" + e.NS
	e.CreateImmediateClass(class)
	fleet(e, e.NS, class, []string{"10Gi", "10Gi", "10Gi"})
	c := userClaim(e, "c", class, "1Gi")
	var tried []string
	for range 3 {
		node := placedOn(e, c.Name, tried...)
		tried = append(tried, node)
		handBack(t, e, node, c.Name)
	}
	e.WaitEvent(c.UID, placement.ReasonNotPlaced, "handed it back")
	start := time.Now()
	again := placedOn(e, c.Name)
	t.Logf("placed again on %s %s after every node handed it back", again, time.Since(start).Round(100*time.Millisecond))
}
