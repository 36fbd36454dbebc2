package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"source.plinth.dev/node/core/volume"
)

func TestKubeletBlockTarget(t *testing.T) {
	for _, tc := range []struct {
		path, want string
	}{
		{"/k/plugins/kubernetes.io/csi/volumeDevices/pv-1/dev/pod-a", "/k/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/pod-a"},
		{"/k/plugins/kubernetes.io/csi/volumeDevices/pv-1/dev/pod-a/", "/k/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/pod-a"},
		// Not the kubelet's device map shape: no mapping.
		{"/k/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/pod-a", ""},
		{"/k/plugins/kubernetes.io/csi/volumeDevices/publish/dev/pod-a", ""},
		{"/k/plugins/kubernetes.io/csi/other/pv-1/dev/pod-a", ""},
		{"/k/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount", ""},
		{"dev/pod-a", ""},
		{"/", ""},
		{"", ""},
	} {
		got, ok := kubeletBlockTarget(tc.path)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("kubeletBlockTarget(%q) = %q, %v; want %q", tc.path, got, ok, tc.want)
		}
	}
}

// TestBlockStatsAtKubeletMapPath: the kubelet asks for a block volume's
// stats with its per-pod device map path, not the target it published; the
// plugin answers for the publication behind it, and only for that one.
func TestBlockStatsAtKubeletMapPath(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("blk", volume.Block, 2*MiB)
	e.create("fs", volume.Filesystem, MiB)
	devices := filepath.Join(e.root.Kubelet.Plugins.FullPath(), "kubernetes.io", "csi", "volumeDevices")
	target := filepath.Join(devices, "publish", "pv-blk", "pod-a")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := e.publish("blk", target, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	mapPath := filepath.Join(devices, "pv-blk", "dev", "pod-a")
	resp, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "blk", VolumePath: mapPath})
	if err != nil {
		t.Fatalf("stats at the kubelet's device map path: %v", err)
	}
	if u := usage(resp, csi.VolumeUsage_BYTES); u == nil || u.Total != 2*MiB {
		t.Errorf("block usage = %v, want total %d", u, 2*MiB)
	}
	for _, tc := range []struct{ id, path string }{
		{"blk", filepath.Join(devices, "pv-blk", "dev", "pod-b")}, // another pod: not published
		{"blk", filepath.Join(devices, "pv-other", "dev", "pod-a")},
		{"fs", mapPath}, // a filesystem volume never maps
	} {
		_, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: tc.id, VolumePath: tc.path})
		wantCode(t, tc.id+" at "+tc.path, err, codes.NotFound)
	}
}
