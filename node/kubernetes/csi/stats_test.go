package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
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
