package csi

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/names"
)

func TestControllerLifecycle(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	c := &controller{s: e.srv}
	long := strings.Repeat("Sanity-Name-", 10) // 120 characters, upper case
	req := func(name string, mode volume.Mode, size int64) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{
			Name:               name,
			VolumeCapabilities: []*csi.VolumeCapability{capability(mode, rwo)},
			CapacityRange:      &csi.CapacityRange{RequiredBytes: size},
		}
	}
	v1, err := c.CreateVolume(ctx, req(long, volume.Filesystem, 3*MiB+1))
	if err != nil {
		t.Fatal(err)
	}
	if id := v1.Volume.VolumeId; volume.ValidateID(id) != nil || id != VolumeIDForName(long) || v1.Volume.CapacityBytes != 3*MiB+volume.Alignment {
		t.Errorf("CreateVolume = %+v", v1.Volume)
	}
	if topo := v1.Volume.GetAccessibleTopology(); len(topo) != 1 || topo[0].Segments[names.TopologyKeyHostname] != "node-a" {
		t.Errorf("topology %v", topo)
	}
	v2, err := c.CreateVolume(ctx, req(long, volume.Filesystem, 3*MiB+1))
	if err != nil || v2.Volume.VolumeId != v1.Volume.VolumeId {
		t.Errorf("repeated CreateVolume = %+v, %v", v2, err)
	}
	_, err = c.CreateVolume(ctx, req(long, volume.Filesystem, 8*MiB))
	wantCode(t, "CreateVolume with another size", err, codes.AlreadyExists)
	_, err = c.CreateVolume(ctx, req(long, volume.Block, 3*MiB+1))
	wantCode(t, "CreateVolume with another mode", err, codes.AlreadyExists)
	if id := VolumeIDForName("pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10"); id != "pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10" {
		t.Errorf("a valid name is not used as the ID: %s", id)
	}

	bad := []struct {
		name string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", req("", volume.Block, MiB), codes.InvalidArgument},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "x"}, codes.InvalidArgument},
		{"mixed capabilities", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo), capability(volume.Filesystem, rwo)}}, codes.InvalidArgument},
		{"multi-node", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}}, codes.InvalidArgument},
		{"negative size", req("x", volume.Block, -1), codes.InvalidArgument},
		{"limit below rounding", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1000, LimitBytes: 1000}}, codes.OutOfRange},
		{"huge", req("x", volume.Block, 1<<62), codes.OutOfRange},
		{"unknown parameter", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}, Parameters: map[string]string{"fsType": "ext4"}}, codes.InvalidArgument},
		{"an empty content source", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}, VolumeContentSource: &csi.VolumeContentSource{}}, codes.InvalidArgument},
		{"other node", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{names.TopologyKeyHostname: "node-b"}}}}}, codes.ResourceExhausted},
		{"larger than the disk", req("x", volume.Block, 1<<50), codes.ResourceExhausted},
	}
	for _, b := range bad {
		_, err := c.CreateVolume(ctx, b.req)
		wantCode(t, "CreateVolume "+b.name, err, b.want)
	}
	if _, err := e.volumes.Stat(ctx, VolumeIDForName("x")); err == nil {
		t.Errorf("a refused CreateVolume left volume x")
	}

	id := v1.Volume.VolumeId
	vr, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Filesystem, rwo)}})
	if err != nil || vr.Confirmed == nil {
		t.Errorf("ValidateVolumeCapabilities(mount) = %v, %v", vr, err)
	}
	vr, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}})
	if err != nil || vr.Confirmed != nil || vr.Message == "" {
		t.Errorf("ValidateVolumeCapabilities(block) of a filesystem volume = %v, %v", vr, err)
	}
	_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "missing", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}})
	wantCode(t, "ValidateVolumeCapabilities of a missing volume", err, codes.NotFound)

	// A published volume is not deleted under its user.
	if err := e.publish(id, e.target("p"), volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume of a published volume", err, codes.FailedPrecondition)
	if err := e.unpublish(id, e.target("p")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume: %v", err)
		}
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "../x"})
	wantCode(t, "DeleteVolume with a malformed ID", err, codes.InvalidArgument)
}

// TestControllerRootDirMode: csi-serve's CreateVolume takes rootDirMode
// as a StorageClass does for the provisioner: the root directory of a
// filesystem volume gets that mode (0777 without it), the volume context
// says which, a block volume ignores it, and a bad mode is refused.
func TestControllerRootDirMode(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	c := &controller{s: e.srv}
	for _, tc := range []struct {
		name   string
		mode   volume.Mode
		params map[string]string
		want   string // root directory mode and volume context; "" for none
	}{
		{"plain", volume.Filesystem, nil, "0777"},
		{"strict", volume.Filesystem, map[string]string{names.ParameterRootDirMode: "0770"}, "0770"},
		{"blk", volume.Block, map[string]string{names.ParameterRootDirMode: "0770"}, ""},
	} {
		resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: tc.name, Parameters: tc.params,
			VolumeCapabilities: []*csi.VolumeCapability{capability(tc.mode, rwo)}, CapacityRange: &csi.CapacityRange{RequiredBytes: MiB}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := resp.Volume.VolumeContext[names.ParameterRootDirMode]; got != tc.want {
			t.Errorf("%s: volume context %v, want rootDirMode %q", tc.name, resp.Volume.VolumeContext, tc.want)
		}
		if tc.mode != volume.Filesystem {
			continue
		}
		_, dir, err := e.volumes.Locate(ctx, resp.Volume.VolumeId)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil || volume.FormatRootDirMode(fi.Mode().Perm()) != tc.want {
			t.Errorf("%s: root directory %v, %v; want mode %s", tc.name, fi.Mode(), err, tc.want)
		}
	}
	_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "bad", Parameters: map[string]string{names.ParameterRootDirMode: "4770"},
		VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Filesystem, rwo)}})
	wantCode(t, "CreateVolume with rootDirMode 4770", err, codes.InvalidArgument)
	if _, err := e.volumes.Stat(ctx, VolumeIDForName("bad")); err == nil {
		t.Error("a refused CreateVolume left a volume")
	}
}
