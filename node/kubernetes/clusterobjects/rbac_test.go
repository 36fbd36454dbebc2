package clusterobjects_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/snapshots"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/launch"
)

// TestNodeRoleIsWhatTheNodeUses: the node identity's ClusterRole, with
// the Role it publishes capacity by, grants exactly what plinth-node uses. A real plinth-node process (cluster
// objects, provisioner, resizer, CSI plugin) runs with that identity
// through a workload that takes every path that talks to the API server:
// Ensure with everything installed, provisioning (filesystem, block,
// Retain, a claim whose class appears late, so its failure Event repeats,
// a claim of an Immediate class placed on the node for it, a claim
// restored from a VolumeSnapshot of the node, read before the copy, which
// this host's data directory cannot make),
// the kubelet's part of the CSI plugin (publish, stats, unpublish), a
// resize, an infeasible resize and its recovery, a VolumeSnapshotContent
// of the node (refused: the host's filesystem makes no copy-on-write
// copies) released when its VolumeSnapshot goes, deletion of Released
// Delete PVs, a Released Retain PV deleted by an administrator, and the
// orphan sweep. The API server's audit log then gives every call the node
// made: each must be allowed by a rule of the role (and none refused), and
// each verb on each resource the role grants must have been used.
//
// Deliberately outside the role, and so outside this workload: Ensure's
// creation of missing cluster objects and its repair of a changed role,
// which need admin credentials (see ClusterRole).
func TestNodeRoleIsWhatTheNodeUses(t *testing.T) {
	cp := controllertest.SnapshotAPI(t)
	ctx := context.Background()
	// What an installer does: the cluster objects are in place.
	if err := clusterobjects.Ensure(ctx, cp.Client, capacity.DefaultNamespace, logger(t)); err != nil {
		t.Fatal(err)
	}
	e := controllertest.NewEnv(t, true)
	retain, late := e.Class+"-retain", e.Class+"-late"
	e.CreateClass(retain, corev1.PersistentVolumeReclaimRetain, nil)
	// An orphan the sweep removes (after a live read of its PV) and one
	// it keeps (recorded Retain); both are reported on the Node.
	orphan, kept := ownership.VolumeIDFor(uuid.NewUUID()), ownership.VolumeIDFor(uuid.NewUUID())
	for _, id := range []string{orphan, kept} {
		if _, err := e.Vols.Create(ctx, id, volume.Filesystem, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Vols.SetReclaimPolicy(ctx, kept, volume.ReclaimRetain); err != nil {
		t.Fatal(err)
	}
	// A Node object owns the node's capacity objects: without one the
	// node publishes none.
	e.CreateNode(e.Node, e.Node)
	kubelet := filepath.Join(t.TempDir(), "kubelet")
	p := e.NodeProcess(t, "--orphan-grace-period=2s", "--kubelet-dir="+kubelet)
	p.Start()
	t.Cleanup(func() {
		p.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("plinth-node log (tail):\n%s", p.LogTail())
		}
	})

	fs := e.CreateClaim(controllertest.Claim{Name: "fs"})
	blk := e.CreateClaim(controllertest.Claim{Name: "blk", Mode: corev1.PersistentVolumeBlock})
	keep := e.CreateClaim(controllertest.Claim{Name: "keep", Class: retain})
	waiting := e.CreateClaim(controllertest.Claim{Name: "waiting", Class: late})
	// A claim of a class that binds immediately, placed on the node as
	// the admission server's placer places it.
	immediate := immediateClaim(t, e)
	restored := restoredClaim(t, e)
	// A repeated Event is patched (its count raised), not created again:
	// wait for the node's patch in the audit log itself. An Event's count
	// of 2 is not enough: once, the second failure came as a second
	// created Event and no patch was ever made (the claim's retries go on
	// meanwhile, and the next repeat is patched).
	controllertest.Eventually(t, 60*time.Second, "a repeated ProvisioningFailed Event patched by the node", func() (bool, error) {
		for _, c := range controllertest.NodeCalls(t, e.Node) {
			if c.Verb == "patch" && c.ObjectRef != nil && c.ObjectRef.Resource == "events" {
				return true, nil
			}
		}
		return false, nil
	})
	controllertest.Eventually(t, 60*time.Second, "the node reading the VolumeSnapshotContent of a restore", func() (bool, error) {
		for _, c := range controllertest.NodeCalls(t, e.Node) {
			if c.Verb == "get" && c.ObjectRef != nil && c.ObjectRef.Resource == "volumesnapshotcontents" {
				return true, nil
			}
		}
		return false, nil
	})
	e.CreateClass(late, corev1.PersistentVolumeReclaimDelete, nil)
	for _, c := range []*corev1.PersistentVolumeClaim{fs, blk, keep, waiting, immediate} {
		e.WaitBound(c.Name)
	}
	nodeBinds(t, e, keep.Name)

	kubeletPublishes(t, kubelet, e.Dir, ownership.VolumeIDFor(fs.UID))
	nodeSnapshots(t, e, ownership.VolumeIDFor(fs.UID))

	fsSize := growThroughConflict(t, e, "fs")
	// Ask blk for more than the disk holds, then for less.
	if err := e.SetRequest("blk", "1Pi"); err != nil {
		t.Fatal(err)
	}
	e.WaitEvent(blk.UID, "VolumeResizeFailed", "not enough space")
	if err := e.SetRequest("blk", "32Mi"); err != nil {
		t.Fatal(err)
	}
	e.WaitEvent(fs.UID, "VolumeResizeSuccessful", fsSize)
	e.WaitEvent(blk.UID, "VolumeResizeSuccessful", "32Mi")

	for _, c := range []*corev1.PersistentVolumeClaim{fs, blk, keep, waiting, immediate, restored} {
		if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	keepPV := ownership.VolumeIDFor(keep.UID)
	controllertest.Eventually(t, 60*time.Second, "the Delete PVs gone and the Retain PV Released", func() (bool, error) {
		for _, c := range []*corev1.PersistentVolumeClaim{fs, blk, waiting, immediate} {
			if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(c.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, keepPV, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeReleased, err
	})
	if err := e.Client.CoreV1().PersistentVolumes().Delete(ctx, keepPV, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitEvent(types.UID(e.Node), "OrphanedVolumeDeleted", orphan)
	e.WaitEvent(types.UID(e.Node), "OrphanedVolumeRetained", kept)
	e.WaitEvent(types.UID(e.Node), "OrphanedVolumeRetained", keepPV)
	// A class that goes takes its capacity object with it.
	if err := e.Client.StorageV1().StorageClasses().Delete(ctx, late, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "the capacity of the deleted class removed", func() (bool, error) {
		_, err := e.Client.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace).Get(ctx, capacity.ObjectName(e.Node, late), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// Stop the node, so that its watches end and are logged as answered.
	p.Kill(syscall.SIGTERM)

	rules := append(clusterobjects.ClusterRole().Rules, clusterobjects.CapacityRole(capacity.DefaultNamespace).Rules...)
	checkRole(t, rules, controllertest.NodeCalls(t, e.Node))
}

// immediateClaim creates a StorageClass of the driver that binds
// immediately and a claim of it as the admission server's placer leaves
// one: a user's claim, without annotations, but the selected-node one
// naming the env's node. The node provisions and binds it as any claim
// placed on it; it never places a claim itself (the claims policy would
// refuse that, and checkRole any refused call).
func immediateClaim(t *testing.T, e *controllertest.Env) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	binding := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: e.Class + "-immediate"}, Provisioner: names.DriverName, VolumeBindingMode: &binding}
	if _, err := e.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.StorageV1().StorageClasses().Delete(ctx, sc.Name, metav1.DeleteOptions{}) })
	obj := e.ClaimObject(controllertest.Claim{Name: "immediate", Class: sc.Name})
	obj.Annotations = map[string]string{ownership.AnnSelectedNode: e.Node}
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

// restoredClaim creates a claim placed on the env's node that restores a
// pre-provisioned VolumeSnapshot labelled for that node, whose snapshot
// the engine does not have (the node's snapshot controller reports the
// content as it finds it): the node reads the snapshot and its content
// before it can tell, and says in an Event why it cannot restore it.
func restoredClaim(t *testing.T, e *controllertest.Env) *corev1.PersistentVolumeClaim {
	t.Helper()
	e.CreateSnapshot(controllertest.Snapshot{Name: "restore-source", Node: e.Node, Handle: "snapshot-" + string(uuid.NewUUID()), NodeReports: true})
	obj := e.ClaimObject(controllertest.Claim{Name: "restored"})
	group := "snapshot.storage.k8s.io"
	obj.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "restore-source"}
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

// growThroughConflict grows claim name while it is being written to all
// the time (as users and other controllers do), until the resizer's
// status write meets a conflict and it reads the claim afresh, which the
// audit log shows. A conflict is a race the resizer may win: each round
// that ends with the volume grown and no fresh read asks for 1Mi more.
// It returns the last size asked for.
func growThroughConflict(t *testing.T, e *controllertest.Env, name string) string {
	t.Helper()
	stop := touch(t, e, name)
	defer stop()
	const rounds = 10
	for i := range rounds {
		size := fmt.Sprintf("%dMi", 32+i)
		if err := e.SetRequest(name, size); err != nil {
			t.Fatal(err)
		}
		read := false
		controllertest.Eventually(t, 30*time.Second, "the resizer growing "+name+" to "+size, func() (bool, error) {
			for _, c := range controllertest.NodeCalls(t, e.Node) {
				if c.Verb == "get" && c.ObjectRef != nil && c.ObjectRef.Resource == "persistentvolumeclaims" && c.ObjectRef.Name == name {
					read = true
					return true, nil
				}
			}
			pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return pvc.Status.Capacity.Storage().String() == size, nil
		})
		if read {
			t.Logf("the resizer read claim %s afresh after a conflict, in resize %d of at most %d", name, i+1, rounds)
			return size
		}
	}
	t.Fatalf("the resizer never read claim %s afresh in %d resizes made while it was being written to", name, rounds)
	return ""
}

// touch changes a label of claim name as fast as the API server takes it,
// until the returned function is called, or the test ends (a test that
// fails before it calls stop must not leave the loop reporting into a
// finished test).
func touch(t *testing.T, e *controllertest.Env, name string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{"touch":"%d"}}}`, i)
			if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("touching claim %s: %v", name, err)
				return
			}
		}
	}()
	return stop
}

// kubeletPublishes does what the kubelet does with the CSI plugin of a
// node when a pod uses volume id: it publishes the volume at a target
// path, reads its statistics and unpublishes it.
func kubeletPublishes(t *testing.T, kubelet, dataDir, id string) {
	t.Helper()
	sock := filepath.Join(kubelet, "plugins", names.DriverName, "csi.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	target := filepath.Join(kubelet, "pods", "pod-1", "volumes", "kubernetes.io~csi", id, "mount")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil { // the kubelet makes the parent
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	if _, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: capability},
		grpc.WaitForReady(true)); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("pod"), 0o644); err != nil {
		t.Errorf("writing through the published target: %v", err)
	}
	if _, err := node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target}); err != nil {
		t.Errorf("NodeGetVolumeStats: %v", err)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
}

// access is one right: a verb on a resource ("persistentvolumeclaims/status"
// for a subresource) of an API group.
type access struct{ group, resource, verb string }

func (a access) String() string {
	if a.group == "" {
		return a.verb + " " + a.resource
	}
	return a.verb + " " + a.group + "/" + a.resource
}

// checkRole fails the test for every call not allowed by rules (or refused
// by the API server) and for every right in rules no call used.
func checkRole(t *testing.T, rules []rbacv1.PolicyRule, calls []launch.AuditEvent) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatal("no calls of the node in the audit log")
	}
	used := map[access]int{}
	for _, c := range calls {
		ref := c.ObjectRef
		if ref == nil {
			t.Errorf("%s %s: a non-resource URL, which the role does not grant", c.Verb, c.RequestURI)
			continue
		}
		a := access{ref.APIGroup, ref.Resource, c.Verb}
		if ref.Subresource != "" {
			a.resource += "/" + ref.Subresource
		}
		used[a]++
		if c.Code() == 403 {
			t.Errorf("%s %s was refused (403)", a, c.RequestURI)
		}
		if !allows(rules, a, ref.Name) {
			t.Errorf("%s %s (%s): no rule of the role allows it", a, ref.Name, c.RequestURI)
		}
	}
	var summary []string
	for a, n := range used {
		summary = append(summary, fmt.Sprintf("%s: %d", a, n))
	}
	sort.Strings(summary)
	t.Logf("the node's API calls by right:\n  %s", strings.Join(summary, "\n  "))
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if a := (access{g, res, v}); used[a] == 0 {
						t.Errorf("the role grants %s, which the node never used", a)
					}
				}
			}
		}
	}
}

// allows reports whether a rule grants a on the object name ("" for a
// collection), as the RBAC authorizer decides for rules without
// wildcards (the role has none).
func allows(rules []rbacv1.PolicyRule, a access, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, a.group) && slices.Contains(r.Resources, a.resource) && slices.Contains(r.Verbs, a.verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// nodeBinds waits for the node's binding of claim name in the audit log:
// its patch of the claim (which it never places: the claim arrived with
// its node selected), and, where that patch was accepted, of the claim's
// status. The PV controller may bind first, and the node's patch then
// meets a conflict and is its last.
func nodeBinds(t *testing.T, e *controllertest.Env, name string) {
	t.Helper()
	controllertest.Eventually(t, 30*time.Second, "the node binding claim "+name, func() (bool, error) {
		accepted, status := -1, false
		for _, c := range controllertest.NodeCalls(t, e.Node) {
			if c.Verb != "patch" || c.ObjectRef == nil || c.ObjectRef.Resource != "persistentvolumeclaims" || c.ObjectRef.Name != name {
				continue
			}
			switch c.ObjectRef.Subresource {
			case "":
				accepted = max(accepted, 0)
				if code := c.Code(); code >= 200 && code < 300 {
					accepted = 1
				}
			case "status":
				status = true
			}
		}
		return accepted == 0 || (accepted == 1 && status), nil
	})
}

// nodeSnapshots has the node act on a VolumeSnapshotContent of its volume
// id, as the snapshot-controller makes one: labelled for the node, bound
// to a VolumeSnapshot. The snapshot is refused (the env's data directory
// is on the host's filesystem, without reflink), which the node records in
// the content's status and an Event; then the content is released as the
// snapshot-controller releases it when its VolumeSnapshot is deleted, and
// the node removes its finalizer.
func nodeSnapshots(t *testing.T, e *controllertest.Env, id string) {
	t.Helper()
	ctx := context.Background()
	api := snapshotClient(t, e).SnapshotV1().VolumeSnapshotContents()
	name := e.NS + "-content"
	c := &crdv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ownership.LabelSnapshotManagedBy: e.Node}},
		Spec: crdv1.VolumeSnapshotContentSpec{
			Driver:                  names.DriverName,
			DeletionPolicy:          crdv1.VolumeSnapshotContentDelete,
			Source:                  crdv1.VolumeSnapshotContentSource{VolumeHandle: &id},
			VolumeSnapshotClassName: &clusterobjects.SnapshotClass().Name,
			VolumeSnapshotRef:       corev1.ObjectReference{Namespace: e.NS, Name: "snap", UID: uuid.NewUUID()},
		},
	}
	if _, err := api.Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "content "+name+" refused and protected", func() (bool, error) {
		c, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return c.Status != nil && c.Status.Error != nil && slices.Contains(c.Finalizers, snapshots.FinalizerBound), nil
	})
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"yes"}}}`, snapshots.AnnBeingDeleted)
	if _, err := api.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "content "+name+" released by the node", func() (bool, error) {
		_, err := api.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// snapshotClient is a client of the snapshot API with the env's admin
// rights.
func snapshotClient(t *testing.T, e *controllertest.Env) snapclient.Interface {
	t.Helper()
	cfg := rest.CopyConfig(e.CP.RESTConfig)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	c, err := snapclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
