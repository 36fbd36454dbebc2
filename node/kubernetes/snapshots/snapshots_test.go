package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/volumetest"
)

// TestSnapshotOfAClaim: a user snapshots a claim of this node with a
// VolumeSnapshotClass of policy Delete. The snapshot-controller makes the
// content and labels it for the node; the node makes the snapshot in its
// engine, named for the VolumeSnapshot, and the VolumeSnapshot becomes
// readyToUse with the claim's size to restore and a creation time.
// Deleting the VolumeSnapshot deletes the engine's snapshot, and then
// the content and the VolumeSnapshot are gone.
func TestSnapshotOfAClaim(t *testing.T) {
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	// The snapshot-controller finds a content's node by the PV's node
	// affinity among the Node objects.
	e.CreateNode(e.Node, e.Node)
	e.startProvisioner()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	e.startSnapshots(m)
	e.CreateClaim(controllertest.Claim{Name: "data", Size: "16Mi"})
	_, pv := e.WaitBound("data")
	_, dir, err := e.Vols.Locate(ctx, pv.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("before the snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	class := e.createClass("delete", crdv1.VolumeSnapshotContentDelete, nil)
	start := time.Now()
	vs := e.createSnapshot("snap", "data", class)

	snapshots := e.snaps.SnapshotV1().VolumeSnapshots(e.NS)
	controllertest.Eventually(t, 60*time.Second, "VolumeSnapshot snap readyToUse", func() (bool, error) {
		var err error
		if vs, err = snapshots.Get(ctx, "snap", metav1.GetOptions{}); err != nil {
			return false, err
		}
		s := vs.Status
		return s != nil && s.ReadyToUse != nil && *s.ReadyToUse, fmt.Errorf("status %+v", s)
	})
	if want := resource.MustParse("16Mi"); vs.Status.RestoreSize == nil || vs.Status.RestoreSize.Cmp(want) != 0 {
		t.Errorf("VolumeSnapshot restoreSize %v, want %s", vs.Status.RestoreSize, want.String())
	}
	if vs.Status.CreationTime == nil || vs.Status.CreationTime.Before(&metav1.Time{Time: start.Truncate(time.Second)}) {
		t.Errorf("VolumeSnapshot creationTime %v, want one after %s", vs.Status.CreationTime, start)
	}
	c, err := e.get(*vs.Status.BoundVolumeSnapshotContentName)
	if err != nil {
		t.Fatal(err)
	}
	want := SnapshotName(string(vs.UID))
	if h := c.Status.SnapshotHandle; h == nil || *h != want {
		t.Errorf("content %s: snapshotHandle %v, want %s", c.Name, describe(c.Status), want)
	}
	if _, marked := c.Annotations[AnnBeingCreated]; marked {
		t.Errorf("content %s still marked %s", c.Name, AnnBeingCreated)
	}
	snap, err := e.Vols.GetSnapshot(ctx, want)
	if err != nil {
		t.Fatalf("the engine's snapshot: %v", err)
	}
	if snap.SourceVolumeID != pv.Name || snap.SizeBytes != 16<<20 || !snap.ReadyToUse {
		t.Errorf("the engine's snapshot is %+v, want a ready one of volume %s of 16Mi", snap, pv.Name)
	}
	if c.Status.CreationTime == nil || *c.Status.CreationTime != snap.CreatedAt.UnixNano() {
		t.Errorf("content creationTime %v, want the engine's %d", c.Status.CreationTime, snap.CreatedAt.UnixNano())
	}

	if err := snapshots.Delete(ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 60*time.Second, "VolumeSnapshot snap and its content gone", func() (bool, error) {
		if _, err := e.get(c.Name); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("content: %v", err)
		}
		_, err := snapshots.Get(ctx, "snap", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if _, err := e.Vols.GetSnapshot(ctx, want); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("the engine's snapshot %s after its VolumeSnapshot was deleted: %v, want it gone", want, err)
	}
	// An operator sees both in the node's operation metrics.
	f, err := metricstest.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []metrics.Operation{metrics.Snapshot, metrics.SnapshotDelete} {
		if n := f.Value("plinth_operation_duration_seconds", "operation", string(op)); n != 1 {
			t.Errorf("%v %s operations counted, want 1", n, op)
		}
	}
}

// TestDeletionPolicy: a content whose VolumeSnapshot is being deleted
// (the snapshot-controller's mark, set here by hand) loses its finalizer;
// its engine snapshot goes with it for policy Delete and stays for
// Retain.
func TestDeletionPolicy(t *testing.T) {
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	e.startSnapshots()
	id := e.volume(volume.Block, 4<<20)
	for _, policy := range []crdv1.DeletionPolicy{crdv1.VolumeSnapshotContentDelete, crdv1.VolumeSnapshotContentRetain} {
		name := e.NS + "-" + strings.ToLower(string(policy))
		made := e.create(content{name: name, node: e.Node, volume: id, policy: policy})
		handle := SnapshotName(string(made.Spec.VolumeSnapshotRef.UID))
		c := e.waitStatus(name, "ready", readyToUse)
		if got := describe(c.Status); c.Status.SnapshotHandle == nil || *c.Status.SnapshotHandle != handle ||
			c.Status.RestoreSize == nil || *c.Status.RestoreSize != 4<<20 {
			t.Errorf("content %s: status %s restoreSize %v, want handle %s and 4 MiB", name, got, c.Status.RestoreSize, handle)
		}
		// The snapshot-controller's finalizer, which the node removes.
		controllertest.Eventually(t, 30*time.Second, "content "+name+" protected", func() (bool, error) {
			c, err := e.get(name)
			return err == nil && hasFinalizer(c), err
		})
		e.markDeleted(name)
		controllertest.Eventually(t, 30*time.Second, "content "+name+" gone", func() (bool, error) {
			_, err := e.get(name)
			return apierrors.IsNotFound(err), err
		})
		_, err := e.Vols.GetSnapshot(ctx, handle)
		switch {
		case policy == crdv1.VolumeSnapshotContentDelete && !errors.Is(err, volume.ErrNotFound):
			t.Errorf("policy Delete: snapshot %s: %v, want it deleted", handle, err)
		case policy == crdv1.VolumeSnapshotContentRetain && err != nil:
			t.Errorf("policy Retain: snapshot %s: %v, want it kept", handle, err)
		}
	}
}

// markDeleted does what the snapshot-controller does to a content whose
// VolumeSnapshot is deleted: marks it AnnBeingDeleted and deletes it.
func (e *env) markDeleted(name string) {
	e.T.Helper()
	ctx := context.Background()
	api := e.snaps.SnapshotV1().VolumeSnapshotContents()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"yes"}}}`, AnnBeingDeleted)
	if _, err := api.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.T.Fatal(err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// TestPreProvisionedSnapshot: a content an administrator makes for a
// snapshot already on the node (source.snapshotHandle) becomes ready,
// with the engine's size and creation time.
func TestPreProvisionedSnapshot(t *testing.T) {
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	e.startSnapshots()
	id := e.volume(volume.Filesystem, 8<<20)
	snap, err := e.Vols.CreateSnapshot(ctx, id, "snapshot-"+string(uuid.NewUUID()))
	if err != nil {
		t.Fatal(err)
	}
	name := e.NS + "-static"
	e.create(content{name: name, node: e.Node, handle: snap.ID})
	c := e.waitStatus(name, "ready", readyToUse)
	s := c.Status
	if s.SnapshotHandle == nil || *s.SnapshotHandle != snap.ID || s.RestoreSize == nil || *s.RestoreSize != 8<<20 ||
		s.CreationTime == nil || *s.CreationTime != snap.CreatedAt.UnixNano() || s.Error != nil {
		t.Errorf("content %s: status %s restoreSize %v creationTime %v, want snapshot %s of 8 MiB made at %d",
			name, describe(s), s.RestoreSize, s.CreationTime, snap.ID, snap.CreatedAt.UnixNano())
	}
}

// TestFailuresAreReported: what the node cannot do is written into the
// content's status.error and said in an Event on it, and nothing is made:
// a source volume not on this node, a pre-provisioned snapshot the node
// does not hold. A content labelled for another node is never touched,
// even when its volume is on this one.
func TestFailuresAreReported(t *testing.T) {
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	id := e.volume(volume.Filesystem, 1<<20)
	foreign := e.NS + "-foreign"
	e.create(content{name: foreign, node: e.Node + "-other", volume: id, policy: crdv1.VolumeSnapshotContentDelete})
	e.startSnapshots()
	missing, static := e.NS+"-missing", e.NS+"-static"
	e.create(content{name: missing, node: e.Node, volume: ownership.VolumeIDFor(uuid.NewUUID())})
	e.create(content{name: static, node: e.Node, handle: "snapshot-" + string(uuid.NewUUID())})

	e.waitError(missing, ReasonCreationFailed, "is not on node "+e.Node)
	e.waitError(static, ReasonCheckFailed, "is not on node "+e.Node)
	e.notMarked(missing)
	c, err := e.get(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, marked := c.Annotations[AnnBeingCreated]; c.Status != nil || marked {
		t.Errorf("content %s of another node: status %s, annotations %v; want it untouched", foreign, describe(c.Status), c.Annotations)
	}
	if snaps, err := e.Vols.ListSnapshots(ctx); err != nil || len(snaps) != 0 {
		t.Errorf("snapshots in the engine: %v (%v), want none", snaps, err)
	}
}

// TestNoCopyOnWrite: on a data filesystem that makes no copy-on-write
// copies (the host's, here) a snapshot is refused, and the content says
// why.
func TestNoCopyOnWrite(t *testing.T) {
	e := newEnv(t, nil)
	id := e.volume(volume.Filesystem, 1<<20)
	e.startSnapshots()
	name := e.NS + "-nocopy"
	e.create(content{name: name, node: e.Node, volume: id})
	e.waitError(name, ReasonCreationFailed, "need a data filesystem with reflink")
	e.notMarked(name)
}

// notMarked waits until content name is not marked AnnBeingCreated: the
// engine answered, so the content is not held back from deletion for a
// snapshot being made. (Each retry marks it again while it asks the
// engine, for a few milliseconds every RetryMax.)
func (e *env) notMarked(name string) {
	e.T.Helper()
	controllertest.Eventually(e.T, 10*time.Second, "content "+name+" not marked "+AnnBeingCreated, func() (bool, error) {
		c, err := e.get(name)
		if err != nil {
			return false, err
		}
		_, marked := c.Annotations[AnnBeingCreated]
		return !marked, nil
	})
}

// TestWaitsForTheSnapshotAPI: in a cluster that does not serve the
// snapshot API the controller waits, healthy, says so once and does not
// restart; once an administrator installs the API, it acts on the node's
// contents within its poll.
func TestWaitsForTheSnapshotAPI(t *testing.T) {
	cp := controllertest.NewControlPlane(t)
	e := newEnvOn(t, cp, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	c, err := New(Config{Base: e.base(), Snapshots: e.snaps, Volumes: e.Vols, APIPoll: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, c.Run)
	const waiting = "does not serve the snapshot API"
	controllertest.Eventually(t, 10*time.Second, "the controller saying it waits", func() (bool, error) {
		return strings.Contains(logs(t, lt), waiting), nil
	})
	time.Sleep(2 * time.Second) // ten polls
	if got := logs(t, lt); strings.Count(got, waiting) != 1 || strings.Contains(got, "restart") {
		t.Fatalf("while the API is missing the controller logged:\n%s\nwant %q once and no restart", got, waiting)
	}

	if err := cp.StartSnapshotAPI(ctx); err != nil {
		t.Fatal(err)
	}
	id := e.volume(volume.Block, 1<<20)
	name := e.NS + "-late"
	e.create(content{name: name, node: e.Node, volume: id})
	e.waitStatus(name, "ready", readyToUse)
}

// logs is every line logged in the tree so far.
func logs(t *testing.T, lt *logtree.LogTree) string {
	t.Helper()
	text, err := lt.Text("root")
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestResumesAfterACrash: a node killed after the engine made a snapshot
// but before the content recorded it leaves the content marked being
// created, without status, and the snapshot in the engine. The next run
// records that same snapshot (the engine's CreateSnapshot finds it) and
// takes the mark off: no second snapshot, none lost.
func TestResumesAfterACrash(t *testing.T) {
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	id := e.volume(volume.Filesystem, 2<<20)
	name := e.NS + "-crashed"
	made := e.create(content{name: name, node: e.Node, volume: id})
	// What the crashed run left: the mark, and the snapshot.
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"yes"}}}`, AnnBeingCreated)
	if _, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	handle := SnapshotName(string(made.Spec.VolumeSnapshotRef.UID))
	before, err := e.Vols.CreateSnapshot(ctx, id, handle)
	if err != nil {
		t.Fatal(err)
	}

	e.startSnapshots()
	c := e.waitStatus(name, "ready", readyToUse)
	if s := c.Status; s.SnapshotHandle == nil || *s.SnapshotHandle != handle || s.CreationTime == nil || *s.CreationTime != before.CreatedAt.UnixNano() {
		t.Errorf("content %s: status %s creationTime %v, want the crashed run's snapshot %s made at %d",
			name, describe(s), s.CreationTime, handle, before.CreatedAt.UnixNano())
	}
	e.notMarked(name)
	if snaps, err := e.Vols.ListSnapshots(ctx); err != nil || len(snaps) != 1 || snaps[0].ID != handle {
		t.Errorf("snapshots in the engine: %+v (%v), want only %s", snaps, err, handle)
	}
}

// TestReleaseDeletesOnlyTheContentsSnapshot: a Delete content whose status
// names another snapshot than the one made for its VolumeSnapshot (an
// edit by hand, a bug of another writer) deletes neither when it is
// released: a SnapshotDeleteError Event says why and what to do, the
// content keeps its finalizer, and both snapshots stay.
func TestReleaseDeletesOnlyTheContentsSnapshot(t *testing.T) {
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	e.startSnapshots()
	id := e.volume(volume.Block, 4<<20)
	other := SnapshotName(string(uuid.NewUUID()))
	if _, err := e.Vols.CreateSnapshot(ctx, id, other); err != nil {
		t.Fatal(err)
	}
	name := e.NS + "-renamed"
	made := e.create(content{name: name, node: e.Node, volume: id, policy: crdv1.VolumeSnapshotContentDelete})
	own := SnapshotName(string(made.Spec.VolumeSnapshotRef.UID))
	e.waitStatus(name, "ready", readyToUse)
	patch := fmt.Appendf(nil, `{"status":{"snapshotHandle":%q}}`, other)
	if _, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 30*time.Second, "content "+name+" protected", func() (bool, error) {
		c, err := e.get(name)
		return err == nil && hasFinalizer(c), err
	})
	e.markDeleted(name)
	c, err := e.get(name)
	if err != nil {
		t.Fatal(err)
	}
	e.WaitEvent(c.UID, ReasonDeleteError, "not deleting either")
	if c, err = e.get(name); err != nil || !hasFinalizer(c) {
		t.Errorf("content %s after a refused release: %v, finalizers %v; want it kept with %s", name, err, c.Finalizers, FinalizerBound)
	}
	for _, snap := range []string{own, other} {
		if _, err := e.Vols.GetSnapshot(ctx, snap); err != nil {
			t.Errorf("snapshot %s after a refused release: %v, want it kept", snap, err)
		}
	}
}
