package csi

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
)

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
	// The bind mount disappears; the loop device is detached (the node
	// agent, which holds it while it runs, is down).
	if err := unix.Unmount(e.target("fs"), 0); err != nil {
		t.Fatal(err)
	}
	e.die()
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
		if id == "blk" && !strings.Contains(h.String(), "detached behind the node's back") {
			t.Errorf("health of a block publication whose device was detached = %v, want it named detached", h)
		}
	}
	// A block image with holes (its pod discarded them: mkfs, fstrim) is
	// not damaged while the data filesystem has the room to fill them
	// (the volume layer keeps it from new volumes): only the detached
	// device is a problem.
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
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 1 || strings.Contains(h.String(), "allocated") {
		t.Errorf("health of an unattached block volume with holes the free space can fill = %v, %v; want one problem, the device", h, err)
	}
	// A block publication record that names no loop device (edited by
	// hand) is a problem to report, not a crash.
	rec := *e.srv.store.get(e.target("blk"))
	rec.Loop = nil
	if err := e.srv.store.put(&rec); err != nil {
		t.Fatal(err)
	}
	h, err = e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "blk", VolumePublishPath: e.target("blk")})
	if err != nil || !strings.Contains(h.String(), "names no loop device") {
		t.Errorf("health of a block publication whose record names no loop device = %v, %v", h, err)
	}
}
