package snapshots

import (
	"context"
	"os"
	"testing"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/volumetest"
)

// TestClassParameters: the node makes a snapshot with its
// VolumeSnapshotClass's parameters. A class that asks for what Plinth
// cannot do (a bad ratio, a StorageClass's parameter) or does not exist
// is written into the content's status and an Event, and nothing is made.
// A class's overcommit reaches the engine: with a first snapshot
// promising a quarter of the data filesystem, a snapshot of a block
// volume of 9/32 of it is refused under a class without over-commit and
// made under ratio 2 (the engine's own check of that split:
// volume.TestSnapshotOvercommitLendsPromisedRoom).
func TestClassParameters(t *testing.T) {
	const mib = 1 << 20
	e := newEnv(t, controllertest.NewVolumes(t, volumetest.ReflinkXFS(t), true))
	ctx := context.Background()
	space, err := e.Vols.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	room := space.Available(volume.NoOvercommit)
	a, b := ownership.VolumeIDFor(uuid.NewUUID()), ownership.VolumeIDFor(uuid.NewUUID())
	for id, size := range map[string]int64{a: room / 4 / mib * mib, b: room * 9 / 32 / mib * mib} {
		if _, err := e.Vols.Create(ctx, id, volume.Block, size); err != nil {
			t.Fatal(err)
		}
		writeAll(t, e.Vols, id, size)
	}
	del := crdv1.VolumeSnapshotContentDelete
	bad := e.createClass("bad-ratio", del, map[string]string{"overcommit": "0.5"})
	volumeParam := e.createClass("volume-param", del, map[string]string{"rootDirMode": "0770"})
	tight := e.createClass("tight", del, nil)
	lent := e.createClass("lent", del, map[string]string{"overcommit": "2"})
	e.startSnapshots()

	for _, c := range []struct{ name, class, want string }{
		{e.NS + "-bad-ratio", bad, "parameter overcommit"},
		{e.NS + "-volume-param", volumeParam, "unknown parameters rootDirMode"},
		{e.NS + "-no-class", "vsc-" + e.NS + "-none", "does not exist"},
	} {
		e.create(content{name: c.name, node: e.Node, volume: a, class: c.class})
		e.waitError(c.name, ReasonCreationFailed, c.want)
		e.notMarked(c.name)
	}
	if snaps, err := e.Vols.ListSnapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots in the engine after contents of unusable classes: %v (%v), want none", snaps, err)
	}

	first := e.NS + "-first"
	e.create(content{name: first, node: e.Node, volume: a, class: tight})
	e.waitStatus(first, "ready", readyToUse)
	refused, made := e.NS+"-refused", e.NS+"-lent"
	e.create(content{name: refused, node: e.Node, volume: b, class: tight})
	e.waitError(refused, ReasonCreationFailed, "not enough space")
	e.create(content{name: made, node: e.Node, volume: b, class: lent})
	e.waitStatus(made, "ready under over-commit 2", readyToUse)
}

// readyToUse reports a content status ready to use.
func readyToUse(s *crdv1.VolumeSnapshotContentStatus) bool {
	return s.ReadyToUse != nil && *s.ReadyToUse
}

// writeAll writes size bytes over block volume id's image, as a pod
// writing its device would, so that a snapshot shares (and reserves)
// every block: XFS does not share extents never written.
func writeAll(t *testing.T, m *volume.Manager, id string, size int64) {
	t.Helper()
	_, img, err := m.Locate(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const mib = 1 << 20
	chunk := make([]byte, mib)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for off := int64(0); off < size; off += mib {
		if _, err := f.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
