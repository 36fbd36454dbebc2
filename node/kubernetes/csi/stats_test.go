package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"source.plinth.dev/build/ktest"
	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/loop"
)

func usage(resp *csi.NodeGetVolumeStatsResponse, unit csi.VolumeUsage_Unit) *csi.VolumeUsage {
	for _, u := range resp.GetUsage() {
		if u.GetUnit() == unit {
			return u
		}
	}
	return nil
}

// TestStatsFromQuota runs in the kernel VM, where the volume has a real
// project quota: NodeGetVolumeStats reports exactly the quota's figures.
func TestStatsFromQuota(t *testing.T) {
	ktest.RequireVM(t)
	e := newEnv(t, filepath.Join(ktest.TempDir(t, "xfs"), "data"))
	if !e.volumes.CapacityEnforced() {
		t.Fatalf("quotas not enforced on the VM's XFS: %v", e.volumes.QuotaError)
	}
	ctx := context.Background()
	e.create("q", volume.Filesystem, 16*MiB)
	target := e.target("q")
	if err := e.publish("q", target, volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), make([]byte, 5*MiB), 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	resp, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "q", VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	_, dir, _ := e.volumes.Locate(ctx, "q")
	q, err := fsquota.GetQuota(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, i := usage(resp, csi.VolumeUsage_BYTES), usage(resp, csi.VolumeUsage_INODES)
	if b == nil || b.Total != 16*MiB || b.Used != int64(q.UsedBytes) || b.Used < 5*MiB || b.Available != b.Total-b.Used {
		t.Errorf("bytes usage %+v, quota %+v", b, q)
	}
	if i == nil || i.Total != int64(volume.InodeLimit(16*MiB)) || i.Used != int64(q.UsedInodes) || i.Available != i.Total-i.Used {
		t.Errorf("inode usage %+v, quota %+v", i, q)
	}
	if c := legacyCondition(t, resp); c.abnormal {
		t.Errorf("healthy volume reported abnormal: %s", c.message)
	}
	// Quota gone: abnormal.
	if err := fsquota.ClearQuota(dir); err != nil {
		t.Fatal(err)
	}
	resp, err = e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "q", VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if c := legacyCondition(t, resp); !c.abnormal {
		t.Errorf("volume without quota reported normal: %s", c.message)
	}
}

// TestConditionReportsBrokenPublications breaks publications behind the
// plugin's back and checks that stats and health say so.
func TestConditionReportsBrokenPublications(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("fs", volume.Filesystem, MiB)
	e.create("blk", volume.Block, MiB)
	for id, mode := range map[string]volume.Mode{"fs": volume.Filesystem, "blk": volume.Block} {
		if err := e.publish(id, e.target(id), mode, false); err != nil {
			t.Fatal(err)
		}
		resp, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: e.target(id)})
		if err != nil {
			t.Fatal(err)
		}
		if c := legacyCondition(t, resp); c.abnormal {
			t.Errorf("%s: healthy publication reported abnormal: %s", id, c.message)
		}
		h, err := e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id})
		if err != nil || h.GetVolumeHealth().GetVolumeId() != id || len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
			t.Errorf("%s: health of a healthy volume = %v, %v", id, h, err)
		}
	}
	// The bind mount disappears; the loop device is detached.
	if err := unix.Unmount(e.target("fs"), 0); err != nil {
		t.Fatal(err)
	}
	d, err := loop.Open("/dev/loop" + itoa(e.srv.store.get(e.target("blk")).Loop.Number))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fs", "blk"} {
		resp, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: e.target(id)})
		if err != nil {
			t.Fatal(err)
		}
		if c := legacyCondition(t, resp); !c.abnormal || c.message == "" {
			t.Errorf("%s: broken publication reported %+v", id, c)
		}
		h, err := e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: e.target(id)})
		if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) == 0 || h.GetVolumeHealth().GetHealthStatuses()[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
			t.Errorf("%s: health of a broken publication = %v, %v", id, h, err)
		}
	}
	// A block image that lost its allocation (holes punched) is damaged.
	_, image, _ := e.volumes.Locate(ctx, "blk")
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, MiB/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	h, err := e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "blk"})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) < 2 {
		t.Errorf("health of a sparse, unattached block volume = %v, %v; want two problems", h, err)
	}
}

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
