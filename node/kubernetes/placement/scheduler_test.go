package placement_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/volumetest"
)

// plinthNode is a real plinth-node for a Node object of the test's, with
// a data directory of its own on an XFS that makes copy-on-write copies.
// There is no kubelet: the scheduler needs only the Node object, and the
// pods are bound to a node without ever running.
type plinthNode struct {
	env *controllertest.Env
}

func startPlinthNode(t *testing.T, e *controllertest.Env, name string) *plinthNode {
	t.Helper()
	ne := *e
	ne.Node = name
	ne.Dir = volumetest.ReflinkXFS(t)
	ne.Vols = controllertest.NewVolumes(t, ne.Dir, true)
	e.CreateNode(name, name)
	p := ne.NodeProcess(t)
	p.Start()
	t.Cleanup(func() {
		p.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("plinth-node %s log (tail):\n%s", name, p.LogTail())
		}
	})
	return &plinthNode{env: &ne}
}

// volumeFile is the path of file name in the filesystem volume of pvc on n.
func (n *plinthNode) volumeFile(t *testing.T, pvc *corev1.PersistentVolumeClaim, name string) string {
	t.Helper()
	d, err := n.env.Vols.Data.Volumes.Filesystem(ownership.VolumeIDFor(pvc.UID))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d.FullPath(), name)
}

// podOf creates a pod that uses claim, pinned to node when it is not
// empty, preferring node prefer when that is not, and returns the node
// the scheduler binds it to.
func podOf(t *testing.T, e *controllertest.Env, name, claim, node, prefer string) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	if node != "" {
		pod.Spec.NodeSelector = map[string]string{names.TopologyKeyHostname: node}
	}
	if prefer != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: names.TopologyKeyHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{prefer}}}}}}}}
	}
	if _, err := e.Client.CoreV1().Pods(e.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var on string
	controllertest.Eventually(t, 90*time.Second, "pod "+name+" scheduled", func() (bool, error) {
		p, err := e.Client.CoreV1().Pods(e.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		on = p.Spec.NodeName
		return on != "", nil
	})
	return on
}

// schedulersClaim creates a user's claim of the env's class (which waits
// for its first consumer), restored from snapshot when it is not empty:
// the scheduler places it, with its pod.
func schedulersClaim(t *testing.T, e *controllertest.Env, name, snapshot string) *corev1.PersistentVolumeClaim {
	t.Helper()
	o := e.ClaimObject(controllertest.Claim{Name: name, Size: "16Mi"})
	o.Annotations = nil
	if snapshot != "" {
		o.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &snapshotGroup, Kind: "VolumeSnapshot", Name: snapshot}
	}
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), o, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

// TestScheduledRestore: with the real kube-scheduler, two real
// plinth-nodes and claims of a WaitForFirstConsumer class, pods that use
// claims restored from a snapshot on one node all land on that node,
// though each prefers the other: the scheduler tries the other node
// first, which hands the claim back with an Event naming the snapshot's
// node; the placer puts the claim there, and the scheduler keeps that
// node, against the pod's preference. Each restored volume holds the
// snapshot's data, and the other node made no volume.
func TestScheduledRestore(t *testing.T) {
	controllertest.SnapshotAPI(t)
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	holder := startPlinthNode(t, e, "holder-"+e.NS)
	other := startPlinthNode(t, e, "other-"+e.NS)

	src := schedulersClaim(t, e, "src", "")
	if on := podOf(t, e, "writer", src.Name, holder.env.Node, ""); on != holder.env.Node {
		t.Fatalf("the source's pod is on %s; want %s", on, holder.env.Node)
	}
	e.WaitBound(src.Name)
	if err := os.WriteFile(holder.volumeFile(t, src, "data"), []byte("snapshot's"), 0o644); err != nil {
		t.Fatal(err)
	}
	snapID := "snapshot-" + string(uuid.NewUUID())
	if _, err := holder.env.Vols.CreateSnapshot(ctx, ownership.VolumeIDFor(src.UID), snapID); err != nil {
		t.Fatal(err)
	}
	// The holder's snapshot controller finds the engine's snapshot and
	// reports the content ready.
	e.CreateSnapshot(controllertest.Snapshot{Name: "snap", Node: holder.env.Node, Handle: snapID, NodeReports: true})

	var restored []*corev1.PersistentVolumeClaim
	for i := range 4 {
		name := fmt.Sprintf("restored-%d", i)
		restored = append(restored, schedulersClaim(t, e, name, "snap"))
		if on := podOf(t, e, "reader-"+name, name, "", other.env.Node); on != holder.env.Node {
			t.Errorf("the pod of %s is on %s; want %s, which holds the snapshot", name, on, holder.env.Node)
		}
	}
	for _, pvc := range restored {
		e.WaitBound(pvc.Name)
		e.WaitEvent(pvc.UID, "ProvisioningFailed", "Cannot provision 16Mi on node "+other.env.Node+
			": its data source is on another node: VolumeSnapshot "+e.NS+"/snap is on node "+holder.env.Node)
		b, err := os.ReadFile(holder.volumeFile(t, pvc, "data"))
		if err != nil || string(b) != "snapshot's" {
			t.Errorf("the volume of %s holds %q (%v); want the snapshot's data", pvc.Name, b, err)
		}
	}
	if ids := controllertest.ListIDs(t, other.env.Vols); len(ids) != 0 {
		t.Errorf("node %s made volumes %v; want none", other.env.Node, ids)
	}
}
