package csi

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/volumetest"
)

// newCopyEnv is an env whose data directory is on an XFS that makes
// copy-on-write copies (volumetest.ReflinkXFS: a loop-mounted XFS on the
// host, the VM's XFS disk with quotas in the kernel VM).
func newCopyEnv(t *testing.T) (*env, *controller) {
	t.Helper()
	e := newEnv(t, filepath.Join(volumetest.ReflinkXFS(t), "data"))
	if err := e.volumes.CopyOnWriteError(); err != nil {
		t.Fatalf("the reflink XFS makes no copies: %v", err)
	}
	return e, &controller{s: e.srv}
}

func createReq(name string, mode volume.Mode, size int64, src *csi.VolumeContentSource) *csi.CreateVolumeRequest {
	r := &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{capability(mode, rwo)}, VolumeContentSource: src}
	if size > 0 {
		r.CapacityRange = &csi.CapacityRange{RequiredBytes: size}
	}
	return r
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

// writeVolume writes data as the file "f" of a filesystem volume, or at
// the start of a block volume's image, as a pod would, and syncs it.
func (e *env) writeVolume(id string, data []byte) {
	e.t.Helper()
	mode, path, err := e.volumes.Locate(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	flags := os.O_WRONLY
	if mode == volume.Filesystem {
		path, flags = filepath.Join(path, "f"), flags|os.O_CREATE|os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// readVolume reads n bytes where writeVolume writes.
func (e *env) readVolume(id string, n int) string {
	e.t.Helper()
	mode, path, err := e.volumes.Locate(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	if mode == volume.Filesystem {
		path = filepath.Join(path, "f")
	}
	f, err := os.Open(path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// TestCreateSnapshot: the csi-snapshotter's name "snapshot-<uid>" is the
// snapshot's ID as it is (the node's convention for snapshot handles),
// other names map to one ID each time; the answer describes a snapshot
// ready to use, of its source's size; a name reused for another volume is
// AlreadyExists, and bad requests are refused without a snapshot made.
func TestCreateSnapshot(t *testing.T) {
	e, c := newCopyEnv(t)
	ctx := context.Background()
	e.create("vol-a", volume.Filesystem, 4*MiB)
	e.create("vol-b", volume.Block, 2*MiB)

	const k8sName = "snapshot-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10"
	before := time.Now().Add(-time.Second)
	s1, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: k8sName, SourceVolumeId: "vol-a"})
	if err != nil {
		t.Fatal(err)
	}
	got := s1.Snapshot
	if got.SnapshotId != k8sName || got.SourceVolumeId != "vol-a" || got.SizeBytes != 4*MiB || !got.ReadyToUse ||
		got.CreationTime.AsTime().Before(before.Truncate(time.Second)) || got.CreationTime.AsTime().After(time.Now()) {
		t.Errorf("CreateSnapshot = %v", got)
	}
	again, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: k8sName, SourceVolumeId: "vol-a"})
	if err != nil || again.Snapshot.SnapshotId != k8sName || !again.Snapshot.CreationTime.AsTime().Equal(got.CreationTime.AsTime()) {
		t.Errorf("repeated CreateSnapshot = %v, %v", again, err)
	}
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: k8sName, SourceVolumeId: "vol-b"})
	wantCode(t, "CreateSnapshot with the name of a snapshot of another volume", err, codes.AlreadyExists)

	long := strings.Repeat("Sanity-Snapshot-", 8) // 128 characters, upper case
	s2, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: long, SourceVolumeId: "vol-b"})
	if err != nil {
		t.Fatal(err)
	}
	if id := s2.Snapshot.SnapshotId; id != SnapshotIDForName(long) || volume.ValidateSnapshotID(id) != nil || s2.Snapshot.SizeBytes != 2*MiB {
		t.Errorf("CreateSnapshot(long name) = %v", s2.Snapshot)
	}
	if id := SnapshotIDForName(long); id != SnapshotIDForName(long) || id == SnapshotIDForName(long+"x") {
		t.Errorf("SnapshotIDForName is not one ID per name: %s", id)
	}

	otherNode := &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{names.TopologyKeyHostname: "node-b"}}}}
	for _, b := range []struct {
		what string
		req  *csi.CreateSnapshotRequest
		want codes.Code
	}{
		{"no name", &csi.CreateSnapshotRequest{SourceVolumeId: "vol-a"}, codes.InvalidArgument},
		{"no source", &csi.CreateSnapshotRequest{Name: "x"}, codes.InvalidArgument},
		{"malformed source", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "../vol-a"}, codes.InvalidArgument},
		{"missing source", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "vol-missing"}, codes.NotFound},
		{"an unknown parameter", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "vol-a", Parameters: map[string]string{"retain": "1d"}}, codes.InvalidArgument},
		{"a volume's parameter", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "vol-a", Parameters: map[string]string{"rootDirMode": "0770"}}, codes.InvalidArgument},
		{"a bad ratio", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "vol-a", Parameters: map[string]string{"overcommit": "0.5"}}, codes.InvalidArgument},
		{"another node", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "vol-a", AccessibilityRequirements: otherNode}, codes.ResourceExhausted},
	} {
		_, err := c.CreateSnapshot(ctx, b.req)
		wantCode(t, "CreateSnapshot with "+b.what, err, b.want)
	}
	// The CO's own parameters are not the driver's; an over-commit ratio
	// is (how it lends room: TestSnapshotOvercommitLendsPromisedRoom).
	if _, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "y", SourceVolumeId: "vol-a",
		Parameters: map[string]string{"csi.storage.k8s.io/volumesnapshot/name": "y", "overcommit": "2"}}); err != nil {
		t.Errorf("CreateSnapshot with a CO parameter and a ratio: %v", err)
	}
	if _, err := e.volumes.GetSnapshot(ctx, "x"); err == nil {
		t.Error("a refused CreateSnapshot left snapshot x")
	}
}

// TestListAndDeleteSnapshots: ListSnapshots finds one snapshot by its ID,
// a volume's snapshots by the volume, nothing for IDs that do not exist,
// and pages through all of them with max_entries and next_token without
// losing or repeating one, also when a snapshot is deleted between pages;
// DeleteSnapshot is idempotent, and a deleted snapshot is listed no more.
func TestListAndDeleteSnapshots(t *testing.T) {
	e, c := newCopyEnv(t)
	ctx := context.Background()
	e.create("vol-a", volume.Filesystem, MiB)
	e.create("vol-b", volume.Block, MiB)
	for _, s := range []struct{ name, vol string }{{"snap-1", "vol-a"}, {"snap-2", "vol-b"}, {"snap-3", "vol-a"}, {"snap-4", "vol-b"}, {"snap-5", "vol-a"}} {
		if _, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: s.name, SourceVolumeId: s.vol}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(req *csi.ListSnapshotsRequest) ([]string, string) {
		t.Helper()
		resp, err := c.ListSnapshots(ctx, req)
		if err != nil {
			t.Fatalf("ListSnapshots(%v): %v", req, err)
		}
		var ids []string
		for _, en := range resp.Entries {
			s := en.Snapshot
			if !s.ReadyToUse || s.SizeBytes != MiB || s.CreationTime == nil || s.SourceVolumeId == "" {
				t.Errorf("ListSnapshots entry %v", s)
			}
			ids = append(ids, s.SnapshotId)
		}
		return ids, resp.NextToken
	}
	for _, tc := range []struct {
		what string
		req  *csi.ListSnapshotsRequest
		want []string
	}{
		{"all", &csi.ListSnapshotsRequest{}, []string{"snap-1", "snap-2", "snap-3", "snap-4", "snap-5"}},
		{"by ID", &csi.ListSnapshotsRequest{SnapshotId: "snap-3"}, []string{"snap-3"}},
		{"by missing ID", &csi.ListSnapshotsRequest{SnapshotId: "snap-9"}, nil},
		{"by malformed ID", &csi.ListSnapshotsRequest{SnapshotId: "Snap 3"}, nil},
		{"by volume", &csi.ListSnapshotsRequest{SourceVolumeId: "vol-b"}, []string{"snap-2", "snap-4"}},
		{"by ID and another volume", &csi.ListSnapshotsRequest{SnapshotId: "snap-3", SourceVolumeId: "vol-b"}, nil},
		{"by missing volume", &csi.ListSnapshotsRequest{SourceVolumeId: "vol-c"}, nil},
		{"a page", &csi.ListSnapshotsRequest{MaxEntries: 2, StartingToken: "snap-3"}, []string{"snap-3", "snap-4"}},
		{"a volume's page", &csi.ListSnapshotsRequest{MaxEntries: 1, SourceVolumeId: "vol-a", StartingToken: "snap-2"}, []string{"snap-3"}},
	} {
		if got, _ := list(tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("ListSnapshots %s = %v, want %v", tc.what, got, tc.want)
		}
	}

	// Paging, with the first snapshot of the next page deleted meanwhile.
	page, next := list(&csi.ListSnapshotsRequest{MaxEntries: 2})
	if !slices.Equal(page, []string{"snap-1", "snap-2"}) || next != "snap-3" {
		t.Errorf("first page %v, next_token %q", page, next)
	}
	for range 2 {
		if _, err := c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "snap-3"}); err != nil {
			t.Fatalf("DeleteSnapshot: %v", err)
		}
	}
	page, next = list(&csi.ListSnapshotsRequest{MaxEntries: 2, StartingToken: next})
	if !slices.Equal(page, []string{"snap-4", "snap-5"}) || next != "" {
		t.Errorf("second page %v, next_token %q; want snap-4, snap-5 and no token", page, next)
	}
	if got, _ := list(&csi.ListSnapshotsRequest{SnapshotId: "snap-3"}); got != nil {
		t.Errorf("deleted snapshot listed: %v", got)
	}
	if _, err := e.volumes.GetSnapshot(ctx, "snap-3"); err == nil {
		t.Error("DeleteSnapshot left the snapshot")
	}

	_, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: "not a token"})
	wantCode(t, "ListSnapshots with a bad starting_token", err, codes.Aborted)
	_, err = c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: -1})
	wantCode(t, "ListSnapshots with negative max_entries", err, codes.InvalidArgument)
	_, err = c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{})
	wantCode(t, "DeleteSnapshot without an ID", err, codes.InvalidArgument)
	_, err = c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "../snap-1"})
	wantCode(t, "DeleteSnapshot with a malformed ID", err, codes.InvalidArgument)
	if _, err := c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "reallyfakesnapshotid"}); err != nil {
		t.Errorf("DeleteSnapshot of a snapshot that never was: %v", err)
	}
}
