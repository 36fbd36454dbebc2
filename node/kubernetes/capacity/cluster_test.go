package capacity_test

// Tests against a real etcd + kube-apiserver + kube-controller-manager +
// kube-scheduler (controllertest.WithScheduler) and real plinth-node
// processes, each with its own data directory on a tmpfs of its own (so
// the free space moves only with the test's volumes and figures can be
// exact). There are no kubelets: the scheduler only needs Node objects,
// which the tests create, and pods are placed (bound to a node) without
// ever running, which is all that placement needs.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/volumetest"
)

// TestMain is not ktest.Main: nothing here needs the kernel VM's quotas
// (the data directories are tmpfs), and the VM has no kube-scheduler.
func TestMain(m *testing.M) { os.Exit(controllertest.Tests(m, controllertest.WithScheduler()).Run()) }

const MiB = 1 << 20

// node is one plinth-node with its own tmpfs data directory and Node
// object: env is a copy of the test's env with its node name, data
// directory and volume manager.
type node struct {
	env  *controllertest.Env
	obj  *corev1.Node
	proc *controllertest.NodeProcess
}

// startNode registers Node name (hostname label host) and starts a
// plinth-node for it on a tmpfs of size bytes.
func startNode(t *testing.T, e *controllertest.Env, name, host string, size int64) *node {
	t.Helper()
	return startNodeWith(t, e, name, host, size)
}

// startNodeWith is startNode with each of change applied to the process
// before it starts (other arguments, say).
func startNodeWith(t *testing.T, e *controllertest.Env, name, host string, size int64, change ...func(*controllertest.NodeProcess)) *node {
	t.Helper()
	ne := *e
	ne.Node = name
	ne.Dir = volumetest.Tmpfs(t, size)
	ne.Vols = controllertest.NewVolumes(t, ne.Dir, true)
	n := &node{env: &ne, obj: e.CreateNode(name, host)}
	n.proc = ne.NodeProcess(t)
	for _, c := range change {
		c(n.proc)
	}
	n.proc.Start()
	t.Cleanup(func() {
		n.proc.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("plinth-node %s log (tail):\n%s", name, n.proc.LogTail())
		}
	})
	return n
}

// published returns the capacity published for class on node, and whether
// the object exists.
func published(t *testing.T, e *controllertest.Env, node, class string) (*storagev1.CSIStorageCapacity, bool) {
	t.Helper()
	c, err := e.Client.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace).Get(context.Background(), capacity.ObjectName(node, class), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	} else if err != nil {
		t.Fatalf("reading capacity of %s on %s: %v", class, node, err)
	}
	return c, true
}

// markBytes is what the data directory's marks (the data ID and the
// cluster ID, written before the first volume) take of n's filesystem.
func markBytes(t *testing.T, n *node) int64 {
	t.Helper()
	var total int64
	for _, f := range []*localstorage.File{&n.env.Vols.Data.State.DataID, &n.env.Vols.Data.State.ClusterID} {
		var st unix.Stat_t
		if err := unix.Stat(f.FullPath(), &st); err != nil {
			t.Fatalf("the data directory's marks: %v", err)
		}
		total += st.Blocks * 512
	}
	return total
}

// available is what the node's own accounting says a new claim can get
// under ratio r, measured by the test beside the node.
func available(t *testing.T, n *node, r volume.Overcommit) int64 {
	t.Helper()
	s, err := n.env.Vols.Space(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Available(r)
}

// waitRecorded waits until the volume of pvc on n has its reclaim policy
// record, the last of the bytes a new volume takes.
func waitRecorded(t *testing.T, n *node, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	id := "pvc-" + string(pvc.UID)
	controllertest.Eventually(t, 30*time.Second, "the reclaim policy record of volume "+id, func() (bool, error) {
		p, err := n.env.Vols.ReclaimPolicy(context.Background(), id)
		return p != volume.ReclaimUnrecorded, err
	})
}

// waitCapacity waits until the capacity published for class on n is want
// and returns when it first saw it.
func waitCapacity(t *testing.T, n *node, class string, want int64) time.Time {
	t.Helper()
	return waitCapacityIn(t, n, class, want, want)
}

// waitCapacityIn waits until the capacity published for class on n is
// within [lo, hi] and returns when it first saw it.
func waitCapacityIn(t *testing.T, n *node, class string, lo, hi int64) time.Time {
	t.Helper()
	var got int64 = -1
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, ok := published(t, n.env, n.env.Node, class); ok && c.Capacity != nil {
			got = c.Capacity.Value()
			if lo <= got && got <= hi {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("capacity of class %s on %s: %d bytes after 30s, want %d to %d", class, n.env.Node, got, lo, hi)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCapacityFollowsVolumes: the node publishes, for each class of the
// driver, what a new claim can get (its own accounting, exact to the
// byte), with the node's hostname as topology and the Node as owner; a
// block claim takes its size off at once, deleting it gives it back, a
// deleted class loses its object, and a deleted Node takes its objects
// with it (the garbage collector). It reports the lag between a volume's
// PV appearing and the capacity that counts it.
func TestCapacityFollowsVolumes(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	over := e.Class + "-over"
	e.CreateClass(over, corev1.PersistentVolumeReclaimDelete, map[string]string{names.ParameterOvercommit: "2"})
	n := startNode(t, e, e.Node, "host-"+e.NS, 64*MiB)
	e = n.env

	empty := available(t, n, volume.NoOvercommit)
	if empty < 60*MiB || empty > 64*MiB {
		t.Fatalf("an empty 64 MiB tmpfs has %d bytes available; the accounting is off", empty)
	}
	waitCapacity(t, n, e.Class, empty)
	waitCapacity(t, n, over, available(t, n, 2))
	obj, _ := published(t, e, e.Node, e.Class)
	if got := obj.NodeTopology.MatchLabels; len(got) != 1 || got[names.TopologyKeyHostname] != "host-"+e.NS {
		t.Errorf("topology %v, want %s=host-%s", got, names.TopologyKeyHostname, e.NS)
	}
	if refs := obj.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != n.obj.UID {
		t.Errorf("owners %+v, want Node %s (uid %s)", refs, n.obj.Name, n.obj.UID)
	}
	if obj.MaximumVolumeSize != nil {
		t.Errorf("maximumVolumeSize %v, want none", obj.MaximumVolumeSize)
	}

	// A block claim: fully allocated, so it takes its size at once. The
	// node has been quiet for longer than the publisher's MinInterval,
	// so the lag measured is that of a lone change (within a burst,
	// changes wait up to MinInterval to be published together).
	time.Sleep(2 * capacity.DefaultMinInterval)
	start := time.Now()
	pvc := e.CreateClaim(controllertest.Claim{Name: "blk", Size: "16Mi", Mode: corev1.PersistentVolumeBlock})
	var pvSeen time.Time
	controllertest.Eventually(t, 30*time.Second, "the claim's PV", func() (bool, error) {
		_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(pvc.UID), metav1.GetOptions{})
		pvSeen = time.Now()
		return err == nil, nil
	})
	// 16 MiB less, and the volume's few bookkeeping bytes (its reclaim
	// policy record, written after the PV) at most.
	seen := waitCapacityIn(t, n, e.Class, empty-16*MiB-volume.CreateOverhead, empty-16*MiB)
	t.Logf("capacity lag: %s after the PV was seen (polling every 10ms), %s after the claim was created", seen.Sub(pvSeen).Round(time.Millisecond), seen.Sub(start).Round(time.Millisecond))
	// Once the record is written too, the figure is the node's own
	// accounting to the byte, well before the next Poll: the volume
	// manager's signal after the record marks the figures stale, whether
	// or not they were published before it.
	waitRecorded(t, n, pvc)
	waitCapacity(t, n, e.Class, available(t, n, volume.NoOvercommit))

	// The provisioner admits by the same figure: a claim placed here on
	// stale figures (pinned to the node, as the scheduler does) that asks
	// for more is refused with an Event and gets no volume; one that asks
	// for exactly the published capacity is provisioned.
	obj, _ = published(t, e, e.Node, e.Class)
	left := obj.Capacity.Value()
	tooBig := e.CreateClaim(controllertest.Claim{Name: "too-big", Size: fmt.Sprint(left + 1*MiB), Mode: corev1.PersistentVolumeBlock})
	e.WaitEvent(tooBig.UID, "ProvisioningFailed", "not enough space for volume")
	e.NoPV(tooBig.UID)
	if ids := e.VolumeIDs(); len(ids) != 1 {
		t.Errorf("volumes after a refused claim: %v, want only the first claim's", ids)
	}
	e.CreateClaim(controllertest.Claim{Name: "exact", Size: fmt.Sprint(left), Mode: corev1.PersistentVolumeBlock})
	e.WaitBound("exact")

	// The kubelet may register the node again under another hostname
	// label; the topology of an object cannot change, so the node
	// replaces it. Deleting the claims releases the PVs; the volumes go,
	// and their space is published again, under the new topology.
	relabel := []byte(`{"metadata":{"labels":{"` + names.TopologyKeyHostname + `":"renamed-` + e.NS + `"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(ctx, e.Node, types.MergePatchType, relabel, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"blk", "too-big", "exact"} {
		if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// All the room is back but the data directory's marks, which were
	// written before the first volume and stay (volume.Manager.DataID,
	// ClusterID).
	waitCapacity(t, n, e.Class, empty-markBytes(t, n))
	obj, _ = published(t, e, e.Node, e.Class)
	if got := obj.NodeTopology.MatchLabels; len(got) != 1 || got[names.TopologyKeyHostname] != "renamed-"+e.NS {
		t.Errorf("topology after the hostname label changed: %v, want %s=renamed-%s", got, names.TopologyKeyHostname, e.NS)
	}

	// A class that is gone has no capacity.
	if err := e.Client.StorageV1().StorageClasses().Delete(ctx, over, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "the deleted class's capacity removed", func() (bool, error) {
		_, ok := published(t, e, e.Node, over)
		return !ok, nil
	})

	// The node leaves the cluster: the garbage collector removes what it
	// owned, though its plinth-node still runs.
	if err := e.Client.CoreV1().Nodes().Delete(ctx, e.Node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 60*time.Second, "the capacity of a deleted Node collected", func() (bool, error) {
		_, ok := published(t, e, e.Node, e.Class)
		return !ok, nil
	})
}

// TestSchedulerPlacesByCapacity: two nodes, one nearly full. A pod whose
// claim (WaitForFirstConsumer) does not fit there lands on the other, and
// its volume is made there; a pod whose claim fits neither stays Pending
// with the scheduler's reason, and no volume is made anywhere.
func TestSchedulerPlacesByCapacity(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	full := startNode(t, e, e.Node+"-a", "host-a-"+e.NS, 64*MiB)
	roomy := startNode(t, e, e.Node+"-b", "host-b-"+e.NS, 64*MiB)

	// Fill node a: a 40 MiB block claim made for it directly (as the
	// scheduler would have chosen it), leaving about 24 MiB.
	filler := full.env.CreateClaim(controllertest.Claim{Name: "filler", Size: "40Mi", Mode: corev1.PersistentVolumeBlock})
	full.env.WaitBound(filler.Name)
	// The node binds the claim before it records the volume's reclaim
	// policy: the figure is final only with the record written.
	waitRecorded(t, full, filler)
	waitCapacity(t, full, e.Class, available(t, full, volume.NoOvercommit))
	waitCapacity(t, roomy, e.Class, available(t, roomy, volume.NoOvercommit))
	if a, b := available(t, full, 1), available(t, roomy, 1); a >= 32*MiB || b < 32*MiB {
		t.Fatalf("set-up: node a has %d bytes, node b %d; want a 32 MiB claim to fit b only", a, b)
	}
	volumesBefore := map[*node]int{full: len(full.env.VolumeIDs()), roomy: len(roomy.env.VolumeIDs())}

	fits := createPodWithClaim(t, e, "fits-b", "32Mi")
	if pod := waitScheduled(t, e, "fits-b"); pod.Spec.NodeName != roomy.env.Node {
		t.Fatalf("pod fits-b was placed on %s, want %s (node %s has no room for its claim)", pod.Spec.NodeName, roomy.env.Node, full.env.Node)
	}
	_, pv := e.WaitBound(fits.Name)
	if ids := roomy.env.VolumeIDs(); !slices.Contains(ids, pv.Name) {
		t.Errorf("volume %s is not on node b (its volumes: %v)", pv.Name, ids)
	}
	if ids := full.env.VolumeIDs(); slices.Contains(ids, pv.Name) || len(ids) != volumesBefore[full] {
		t.Errorf("node a's volumes changed: %v", ids)
	}
	volumesBefore[roomy]++

	// Neither node has 100 MiB: the pod stays Pending, unscheduled, and
	// the scheduler says why.
	none := createPodWithClaim(t, e, "fits-none", "100Mi")
	waitUnschedulable(t, e, "fits-none", "did not have enough free storage")
	// Give a wrong placement time to happen before looking for its traces.
	time.Sleep(5 * time.Second)
	p, err := e.Client.CoreV1().Pods(e.NS).Get(ctx, "fits-none", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod fits-none: node %q, phase %s; want unscheduled and Pending", p.Spec.NodeName, p.Status.Phase)
	}
	claim, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, none.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Spec.VolumeName != "" || claim.Annotations["volume.kubernetes.io/selected-node"] != "" {
		t.Errorf("claim fits-none: volume %q, selected node %q; want neither", claim.Spec.VolumeName, claim.Annotations["volume.kubernetes.io/selected-node"])
	}
	e.NoPV(none.UID)
	for n, before := range volumesBefore {
		if ids := n.env.VolumeIDs(); len(ids) != before {
			t.Errorf("node %s has volumes %v; want the %d it had", n.env.Node, ids, before)
		}
	}
}

// waitScheduled waits until pod name is bound to a node and returns it.
func waitScheduled(t *testing.T, e *controllertest.Env, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	controllertest.Eventually(t, 60*time.Second, "pod "+name+" scheduled", func() (bool, error) {
		var err error
		pod, err = e.Client.CoreV1().Pods(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && pod.Spec.NodeName != "", err
	})
	return pod
}

// waitUnschedulable waits until pod name is reported unschedulable and
// checks that the scheduler's message contains why.
func waitUnschedulable(t *testing.T, e *controllertest.Env, name, why string) {
	t.Helper()
	var cond corev1.PodCondition
	controllertest.Eventually(t, 60*time.Second, "pod "+name+" reported unschedulable", func() (bool, error) {
		p, err := e.Client.CoreV1().Pods(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				cond = c
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(cond.Message, why) {
		t.Errorf("pod %s unschedulable for another reason: %q", name, cond.Message)
	}
	t.Logf("pod %s: %s", name, cond.Message)
}

// createPodWithClaim creates a claim of size in the env's class (as a
// user does: no annotations, the scheduler picks the node) and a pod that
// uses it and tolerates every taint (the Node objects have no kubelet
// behind them, and the node lifecycle controller taints them after a
// while); each of change is applied to the pod before it is created.
func createPodWithClaim(t *testing.T, e *controllertest.Env, name, size string, change ...func(*corev1.Pod)) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	c := e.ClaimObject(controllertest.Claim{Name: name, Size: size})
	c.Annotations = nil
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim %s: %v", name, err)
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		},
	}
	for _, c := range change {
		c(pod)
	}
	// The namespace's default service account may not exist yet.
	controllertest.Eventually(t, 30*time.Second, "pod "+name+" created", func() (bool, error) {
		_, err := e.Client.CoreV1().Pods(e.NS).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, err
	})
	return pvc
}

// TestMovedNamespaceLeavesNothingBehind: a node that publishes in another
// namespace than before (--capacity-namespace changed) removes the objects
// it published in the old one, whose figures the scheduler would otherwise
// go on trusting; other nodes' objects there stay.
func TestMovedNamespaceLeavesNothingBehind(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	e.CreateNode(e.Node, e.Node)
	other := e.Node + "-other"
	e.CreateNode(other, other)
	var namespaces []string
	for _, suffix := range []string{"-old", "-new"} {
		ns := e.NS + suffix
		if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		namespaces = append(namespaces, ns)
	}
	publish := func(node, ns string) (stop func()) {
		t.Helper()
		base := controller.Base{Client: e.Client, Driver: names.DriverName, NodeName: node,
			RetryBase: controllertest.RetryBase, RetryMax: controllertest.RetryMax}
		p, err := capacity.New(capacity.Config{Base: base, Volumes: e.Vols, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		stop, _ = supervisor.TestHarness(t, p.Run)
		return stop
	}
	exists := func(node, ns string) bool {
		_, err := e.Client.StorageV1().CSIStorageCapacities(ns).Get(ctx, capacity.ObjectName(node, e.Class), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	old, moved := namespaces[0], namespaces[1]
	stopOld := publish(e.Node, old)
	stopOther := publish(other, old)
	controllertest.Eventually(t, 30*time.Second, "both nodes' capacity in "+old, func() (bool, error) {
		return exists(e.Node, old) && exists(other, old), nil
	})
	stopOld()
	stopOther()
	publish(e.Node, moved)
	controllertest.Eventually(t, 30*time.Second, "the node's capacity in "+moved+" only", func() (bool, error) {
		return exists(e.Node, moved) && !exists(e.Node, old), nil
	})
	if !exists(other, old) {
		t.Errorf("the other node's capacity in %s was removed", old)
	}
}
