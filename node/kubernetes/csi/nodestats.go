package csi

import (
	"context"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
)

// NodeGetVolumeStats reports a published volume's capacity and usage from
// the volume layer (the project quota: constant time, however many files
// the volume holds) and its condition: abnormal when the volume is damaged
// (quota gone, image sparse) or its publication is (bind mount gone, loop
// device detached or reused).
//
// The volume path must be one of the volume's publications; any other path
// is NotFound, because the plugin reports only on what it published. For
// block volumes the kubelet names the publication by its own per-pod device
// map path instead (see kubeletBlockTarget).
func (s *Server) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	// Under the volume's lock, like NodeGetVolumeHealth: a publication
	// half made is not a broken one.
	unlock := s.locks.Lock(volumeKey(id))
	defer unlock()
	st, err := s.cfg.Volumes.Stat(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	p := s.store.get(path)
	if p == nil && st.Mode == volume.Block {
		if target, ok := kubeletBlockTarget(path); ok {
			p = s.store.get(target)
		}
	}
	if p == nil || p.VolumeID != id {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %q", id, path)
	}
	cond := s.condition(ctx, st, []*publication{p})
	resp := &csi.NodeGetVolumeStatsResponse{}
	setLegacyCondition(resp, cond)
	if st.Mode == volume.Block {
		// Block volumes report their size only; what the pod's
		// filesystem on top holds is not visible from the node.
		resp.Usage = []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: st.CapacityBytes}}
		return resp, nil
	}
	bytes := &csi.VolumeUsage{Unit: csi.VolumeUsage_BYTES, Total: st.CapacityBytes}
	if st.UsageKnown {
		bytes.Used, bytes.Available = st.UsedBytes, st.AvailableBytes
		resp.Usage = []*csi.VolumeUsage{bytes, {
			Unit: csi.VolumeUsage_INODES, Total: st.Inodes, Used: st.InodesUsed, Available: st.InodesFree,
		}}
	} else {
		bytes.Available = st.AvailableBytes
		resp.Usage = []*csi.VolumeUsage{bytes}
	}
	return resp, nil
}

// kubeletBlockTarget maps the volume path the kubelet passes to
// NodeGetVolumeStats for a block volume to the target path it published
// the volume at. For block volumes the kubelet (v1.34, pkg/volume/csi
// newBlockMapper) asks about its per-pod device map entry,
//
//	<kubelet>/plugins/kubernetes.io/csi/volumeDevices/<spec>/dev/<pod UID>
//
// while NodePublishVolume got
//
//	<kubelet>/plugins/kubernetes.io/csi/volumeDevices/publish/<spec>/<pod UID>
//
// Without this mapping the kubelet's stats calls for block volumes fail as
// NotFound and kubelet_volume_stats_* never appear for block PVCs. Only the
// shape is derived here; the caller still requires a publication record of
// the same volume at the result, so a made-up path can only name a target
// the plugin itself published.
func kubeletBlockTarget(path string) (string, bool) {
	dir, pod := filepath.Split(filepath.Clean(path))
	dir = filepath.Clean(dir)
	if pod == "" || filepath.Base(dir) != "dev" {
		return "", false
	}
	spec := filepath.Dir(dir)
	devices := filepath.Dir(spec)
	if filepath.Base(devices) != "volumeDevices" || filepath.Base(spec) == "publish" {
		return "", false
	}
	return filepath.Join(devices, "publish", filepath.Base(spec), pod), true
}
