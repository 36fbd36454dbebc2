package csi

import (
	"context"
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/names"
)

// TestCreateVolumeFromSource: for each mode, a volume made from a snapshot
// holds the data of the moment of the snapshot, one made from a volume
// (a clone) the volume's data now; without a capacity_range a copy is its
// source's size, with a larger one it is larger; the answer names its
// source, and a repeated request gets the same volume.
func TestCreateVolumeFromSource(t *testing.T) {
	e, c := newCopyEnv(t)
	ctx := context.Background()
	for _, mode := range []volume.Mode{volume.Filesystem, volume.Block} {
		t.Run(mode.String(), func(t *testing.T) {
			src := "src-" + mode.String()
			e.create(src, mode, 4*MiB)
			e.writeVolume(src, []byte("before"))
			snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-" + mode.String(), SourceVolumeId: src})
			if err != nil {
				t.Fatal(err)
			}
			e.writeVolume(src, []byte("after!"))

			for _, tc := range []struct {
				name   string
				size   int64
				source *csi.VolumeContentSource
				want   string
			}{
				{"restored-" + mode.String(), 0, fromSnapshot(snap.Snapshot.SnapshotId), "before"},
				{"restored-large-" + mode.String(), 8 * MiB, fromSnapshot(snap.Snapshot.SnapshotId), "before"},
				{"clone-" + mode.String(), 0, fromVolume(src), "after!"},
			} {
				resp, err := c.CreateVolume(ctx, createReq(tc.name, mode, tc.size, tc.source))
				if err != nil {
					t.Fatalf("CreateVolume %s: %v", tc.name, err)
				}
				v := resp.Volume
				wantSize := max(tc.size, 4*MiB)
				if v.VolumeId != tc.name || v.CapacityBytes != wantSize || !proto.Equal(v.ContentSource, tc.source) {
					t.Errorf("CreateVolume %s = %v; want size %d, content_source %v", tc.name, v, wantSize, tc.source)
				}
				if _, ok := v.VolumeContext[names.ParameterRootDirMode]; ok {
					t.Errorf("CreateVolume %s: the volume context gives a copy a root directory mode: %v", tc.name, v.VolumeContext)
				}
				if got := e.readVolume(tc.name, len(tc.want)); got != tc.want {
					t.Errorf("volume %s holds %q, want %q", tc.name, got, tc.want)
				}
				again, err := c.CreateVolume(ctx, createReq(tc.name, mode, tc.size, tc.source))
				if err != nil || again.Volume.VolumeId != tc.name {
					t.Errorf("repeated CreateVolume %s = %v, %v", tc.name, again, err)
				}
			}
			// The copies are volumes of their own: writing one leaves its
			// source as it was.
			e.writeVolume("restored-"+mode.String(), []byte("copy.."))
			if got := e.readVolume(src, 6); got != "after!" {
				t.Errorf("writing a copy changed its source: %q", got)
			}
		})
	}
}

// TestCopiesWithARootDirMode: a copy's root directory is its source's, so
// the rootDirMode parameter, which describes the new volumes of a class,
// neither applies to a restore or a clone nor stops it (as the provisioner
// does: its TestCopiesInAClassWithARootDirMode): both are made with their
// source's mode, and their volume context records none.
func TestCopiesWithARootDirMode(t *testing.T) {
	e, c := newCopyEnv(t)
	ctx := context.Background()
	e.create("src", volume.Filesystem, 4*MiB)
	if _, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: "src"}); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]*csi.VolumeContentSource{"restored": fromSnapshot("snap"), "clone": fromVolume("src")} {
		req := createReq(name, volume.Filesystem, 0, src)
		req.Parameters = map[string]string{names.ParameterRootDirMode: "0770"}
		resp, err := c.CreateVolume(ctx, req)
		if err != nil {
			t.Fatalf("CreateVolume %s with rootDirMode 0770: %v", name, err)
		}
		if v, ok := resp.Volume.VolumeContext[names.ParameterRootDirMode]; ok {
			t.Errorf("CreateVolume %s: the volume context records root directory mode %s; a copy's is its source's", name, v)
		}
		_, path, err := e.volumes.Locate(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != volume.DefaultRootDirMode {
			t.Errorf("volume %s's root has mode %o; want its source's %o", name, got, volume.DefaultRootDirMode)
		}
	}
}

// TestCreateVolumeFromSourceRefusals: the codes the CSI spec names for a
// source that does not exist (NotFound), a volume smaller than its source
// (OutOfRange), a source of the other mode (InvalidArgument) and a name
// already taken by a volume made from something else (AlreadyExists); and
// nothing is left of a refused request.
func TestCreateVolumeFromSourceRefusals(t *testing.T) {
	e, c := newCopyEnv(t)
	ctx := context.Background()
	e.create("src", volume.Filesystem, 4*MiB)
	e.create("empty", volume.Filesystem, 4*MiB)
	if _, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: "src"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVolume(ctx, createReq("copy", volume.Filesystem, 4*MiB, fromSnapshot("snap"))); err != nil {
		t.Fatal(err)
	}
	fs, blk := volume.Filesystem, volume.Block
	for _, tc := range []struct {
		what string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"a missing snapshot", createReq("x", fs, 0, fromSnapshot("snap-missing")), codes.NotFound},
		{"a missing snapshot, sized", createReq("x", fs, 4*MiB, fromSnapshot("snap-missing")), codes.NotFound},
		{"a missing volume", createReq("x", fs, 0, fromVolume("vol-missing")), codes.NotFound},
		{"a missing volume, sized", createReq("x", fs, 4*MiB, fromVolume("vol-missing")), codes.NotFound},
		{"a size below the snapshot's", createReq("x", fs, 2*MiB, fromSnapshot("snap")), codes.OutOfRange},
		{"a size below the volume's", createReq("x", fs, 2*MiB, fromVolume("src")), codes.OutOfRange},
		{"a limit below the source's", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(fs, rwo)},
			CapacityRange: &csi.CapacityRange{LimitBytes: 2 * MiB}, VolumeContentSource: fromSnapshot("snap")}, codes.OutOfRange},
		{"block from a filesystem snapshot", createReq("x", blk, 4*MiB, fromSnapshot("snap")), codes.InvalidArgument},
		{"block from a filesystem volume", createReq("x", blk, 4*MiB, fromVolume("src")), codes.InvalidArgument},
		{"a malformed snapshot ID", createReq("x", fs, 0, fromSnapshot("Snap!")), codes.InvalidArgument},
		{"a malformed volume ID", createReq("x", fs, 0, fromVolume("../src")), codes.InvalidArgument},
		{"no snapshot ID", createReq("x", fs, 0, fromSnapshot("")), codes.InvalidArgument},
		{"itself", createReq("src", fs, 4*MiB, fromVolume("src")), codes.InvalidArgument},
		{"the name of a copy of another source", createReq("copy", fs, 4*MiB, fromVolume("src")), codes.AlreadyExists},
		{"the name of an empty volume", createReq("empty", fs, 4*MiB, fromSnapshot("snap")), codes.AlreadyExists},
	} {
		_, err := c.CreateVolume(ctx, tc.req)
		wantCode(t, "CreateVolume from "+tc.what, err, tc.want)
	}
	if _, err := e.volumes.Stat(ctx, "x"); err == nil {
		t.Error("a refused CreateVolume left volume x")
	}
}

// TestCopiesNeedCopyOnWrite: on a data filesystem without reflink (the
// test's temporary directory, ext4 or tmpfs) the plugin does not offer
// snapshots or clones, refuses them with the codes the spec names, and
// still answers DeleteSnapshot and ListSnapshots (there is nothing).
func TestCopiesNeedCopyOnWrite(t *testing.T) {
	e := newEnv(t, "")
	if e.volumes.CopyOnWriteError() == nil {
		t.Skip("the temporary directory's filesystem makes copy-on-write copies")
	}
	ctx := context.Background()
	c := &controller{s: e.srv}
	caps, err := c.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range caps.Capabilities {
		switch cp.GetRpc().GetType() {
		case csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, csi.ControllerServiceCapability_RPC_CLONE_VOLUME:
			t.Errorf("capability %v offered without copy-on-write", cp.GetRpc().GetType())
		}
	}
	e.create("src", volume.Filesystem, MiB)
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: "src"})
	wantCode(t, "CreateSnapshot", err, codes.Unimplemented)
	_, err = c.CreateVolume(ctx, createReq("x", volume.Filesystem, MiB, fromVolume("src")))
	wantCode(t, "CreateVolume from a volume", err, codes.InvalidArgument)
	_, err = c.CreateVolume(ctx, createReq("x", volume.Filesystem, MiB, fromSnapshot("snap")))
	wantCode(t, "CreateVolume from a snapshot", err, codes.InvalidArgument)
	if _, err := c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "snap"}); err != nil {
		t.Errorf("DeleteSnapshot: %v", err)
	}
	if l, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{}); err != nil || len(l.Entries) != 0 {
		t.Errorf("ListSnapshots = %v, %v", l, err)
	}
}

// TestCapabilitiesOfferCopies: where copies work, the Controller service
// offers snapshots, their listing and clones, so that COs (and
// csi-sanity) use them.
func TestCapabilitiesOfferCopies(t *testing.T) {
	_, c := newCopyEnv(t)
	caps, err := c.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[csi.ControllerServiceCapability_RPC_Type]bool{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT: true,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS:         true,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME:           true,
	}
	for _, cp := range caps.Capabilities {
		delete(want, cp.GetRpc().GetType())
	}
	if len(want) > 0 {
		t.Errorf("capabilities %v lack %v", caps.Capabilities, want)
	}
}

// TestCopiesThatDoNotFit: a snapshot reserves what its source holds and a
// copy its whole size (the engine's space accounting), so a copy of a
// fully allocated block volume that takes 60% of the room left does not
// fit: ResourceExhausted, as the spec says for CreateSnapshot, and
// nothing made.
func TestCopiesThatDoNotFit(t *testing.T) {
	e, c := newCopyEnv(t)
	ctx := context.Background()
	space, err := e.volumes.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.create("big", volume.Block, space.Available(volume.NoOvercommit)/10*6/volume.Alignment*volume.Alignment)
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: "big"})
	wantCode(t, "CreateSnapshot of a volume larger than the free room", err, codes.ResourceExhausted)
	_, err = c.CreateVolume(ctx, createReq("clone", volume.Block, 0, fromVolume("big")))
	wantCode(t, "CreateVolume from a volume larger than the free room", err, codes.ResourceExhausted)
	if l, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{}); err != nil || len(l.Entries) != 0 {
		t.Errorf("after refused copies: ListSnapshots = %v, %v", l, err)
	}
	if _, err := e.volumes.Stat(ctx, "clone"); err == nil {
		t.Error("a refused CreateVolume left volume clone")
	}
}
