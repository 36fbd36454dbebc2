package clusterobjects_test

import (
	"context"
	"encoding/json"
	"testing"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/snapshots"
	"source.plinth.dev/test/controllertest"
)

// TestNodeSnapshotContentsOwnOnly: node A's agent writes what the
// snapshot protocol needs on the VolumeSnapshotContents labelled for it
// (the being-created mark, the status, the removal of the finalizer), and
// nothing on another node's or an unlabelled one: RBAC grants every node
// patch on every content, and without the contents policy one node could
// mark another's snapshot ready, write its status, or drop its finalizer
// so that its VolumeSnapshot goes while the snapshot stays. Nor may A
// give its content to another node, change what it is a snapshot of or
// its deletion policy, or add a finalizer that keeps it. Each refusal must
// come from the contents policy (named in the error).
func TestNodeSnapshotContentsOwnOnly(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	nodeA, nodeB := e.Node, e.Node+"-b"
	admin := snapshotClient(t, e).SnapshotV1().VolumeSnapshotContents()
	path, err := e.CP.NodeAgentKubeconfig(nodeA)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := snapclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	contents := a.SnapshotV1().VolumeSnapshotContents()

	// Contents as the snapshot-controller makes them, each with its
	// finalizer: one for A, one for B, one for no node.
	make := func(suffix string, labels map[string]string) string {
		vol := "pvc-" + string(uuid.NewUUID())
		c := &crdv1.VolumeSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{Name: e.NS + "-" + suffix, Labels: labels, Finalizers: []string{snapshots.FinalizerBound}},
			Spec: crdv1.VolumeSnapshotContentSpec{
				Driver:            names.DriverName,
				DeletionPolicy:    crdv1.VolumeSnapshotContentRetain,
				Source:            crdv1.VolumeSnapshotContentSource{VolumeHandle: &vol},
				VolumeSnapshotRef: corev1.ObjectReference{Namespace: e.NS, Name: suffix, UID: uuid.NewUUID()},
			},
		}
		if _, err := admin.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = admin.Patch(ctx, c.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = admin.Delete(ctx, c.Name, metav1.DeleteOptions{})
		})
		return c.Name
	}
	mine := make("mine", map[string]string{ownership.LabelSnapshotManagedBy: nodeA})
	theirs := make("theirs", map[string]string{ownership.LabelSnapshotManagedBy: nodeB})
	nobody := make("nobody", nil)

	patch := func(name string, p map[string]any, sub ...string) error {
		body, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = contents.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{DryRun: dry}, sub...)
		return err
	}
	meta := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"metadata": m}
	}
	mark := meta("annotations", map[string]any{snapshots.AnnBeingCreated: "yes"})
	status := map[string]any{"status": map[string]any{"snapshotHandle": "snapshot-x", "readyToUse": true, "restoreSize": 1 << 20}}
	unfinalize := meta("finalizers", []string{})

	j := judge{t}
	j.allowed("marking its content being created", patch(mine, mark))
	j.allowed("writing its content's status", patch(mine, status, "status"))
	j.allowed("removing its content's finalizer", patch(mine, unfinalize))

	const policy = clusterobjects.SnapshotContentsPolicyName
	for _, other := range []string{theirs, nobody} {
		j.refused(policy, "marking content "+other+" being created", patch(other, mark))
		j.refused(policy, "writing content "+other+"'s status", patch(other, status, "status"))
		j.refused(policy, "removing content "+other+"'s finalizer", patch(other, unfinalize))
	}
	j.refused(policy, "giving its content to node B", patch(mine, meta("labels", map[string]any{ownership.LabelSnapshotManagedBy: nodeB})))
	j.refused(policy, "unlabelling its content", patch(mine, meta("labels", map[string]any{ownership.LabelSnapshotManagedBy: nil})))
	j.refused(policy, "changing its content's deletion policy",
		patch(mine, map[string]any{"spec": map[string]any{"deletionPolicy": string(crdv1.VolumeSnapshotContentDelete)}}))
	j.refused(policy, "adding a finalizer to its content", patch(mine, meta("finalizers", []string{snapshots.FinalizerBound, "example.com/keep"})))
}
