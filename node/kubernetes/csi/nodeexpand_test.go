package csi

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
)

// TestExpand grows volumes through the controller: a published block
// volume's loop device shows the new size as soon as ControllerExpandVolume
// returns (no node step is needed, so none is asked for), and
// NodeExpandVolume stays an idempotent confirmation.
func TestExpand(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	ctrl := &controller{s: e.srv}
	e.create("blk", volume.Block, 4*MiB)
	e.create("fs", volume.Filesystem, 4*MiB)
	for id, mode := range map[string]volume.Mode{"fs": volume.Filesystem, "blk": volume.Block} {
		if err := e.publish(id, e.target(id), mode, false); err != nil {
			t.Fatal(err)
		}
		_, err := e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: e.target(id), CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * MiB}})
		wantCode(t, "node expansion beyond the volume's size", err, codes.OutOfRange)
		resp, err := ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * MiB}})
		if err != nil || resp.CapacityBytes != 8*MiB || resp.NodeExpansionRequired {
			t.Fatalf("ControllerExpandVolume(%s) = %+v, %v", id, resp, err)
		}
		if mode == volume.Block {
			d, err := loop.Open(e.target(id))
			if err != nil {
				t.Fatal(err)
			}
			if size, err := d.Size(); err != nil || size != 8*MiB {
				t.Errorf("loop device size right after ControllerExpandVolume = %d, %v; want %d", size, err, 8*MiB)
			}
			d.Close()
		}
		for range 2 { // idempotent
			nresp, err := e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: e.target(id), CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * MiB}})
			if err != nil || nresp.CapacityBytes != 8*MiB {
				t.Fatalf("NodeExpandVolume(%s) = %+v, %v", id, nresp, err)
			}
		}
		// A range the volume cannot be in, and the other access type.
		for _, r := range []*csi.CapacityRange{{RequiredBytes: 2 * MiB, LimitBytes: MiB}, {LimitBytes: 4 * MiB}} {
			_, err := e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: e.target(id), CapacityRange: r})
			wantCode(t, "node expansion with an 8 MiB volume outside "+r.String(), err, codes.OutOfRange)
		}
		other := map[volume.Mode]volume.Mode{volume.Filesystem: volume.Block, volume.Block: volume.Filesystem}[mode]
		_, err = e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: e.target(id), VolumeCapability: capability(other, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)})
		wantCode(t, "node expansion of a "+mode.String()+" volume with the other access type", err, codes.InvalidArgument)
	}
	d, err := loop.Open(e.target("blk"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if size, err := d.Size(); err != nil || size != 8*MiB {
		t.Errorf("loop device size after expansion = %d, %v; want %d", size, err, 8*MiB)
	}
}
