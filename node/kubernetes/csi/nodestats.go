package csi

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
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
	st, err := s.Volumes.Stat(ctx, id)
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

// NodeGetVolumeHealth is CSI 1.13's successor of the volume condition: the
// same findings, as health entries.
func (s *Server) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	st, err := s.Volumes.Stat(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	pubs := s.store.forVolume(id)
	if path := req.GetVolumePublishPath(); path != "" {
		p := s.store.get(path)
		if p == nil || p.VolumeID != id {
			return nil, status.Errorf(codes.NotFound, "volume %s is not published at %q", id, path)
		}
		pubs = []*publication{p}
	}
	cond := s.condition(ctx, st, pubs)
	health := &csi.VolumeHealth{VolumeId: id}
	for _, e := range cond.entries {
		health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: e.kind, Reason: e.reason, Message: e.message,
		})
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}, nil
}

// volumeCondition is what the plugin found wrong with a volume.
type volumeCondition struct {
	entries []healthEntry
	// note is a remark for a healthy volume (e.g. capacity not enforced).
	note string
}

type healthEntry struct {
	kind    csi.VolumeHealthErrorType
	reason  string
	message string
}

func (c volumeCondition) abnormal() bool { return len(c.entries) > 0 }

func (c volumeCondition) message() string {
	if !c.abnormal() {
		if c.note != "" {
			return c.note
		}
		return "volume is healthy"
	}
	var msgs []string
	for _, e := range c.entries {
		msgs = append(msgs, e.message)
	}
	return strings.Join(msgs, "; ")
}

// condition checks the volume and the given publications of it.
func (s *Server) condition(ctx context.Context, st volume.Stats, pubs []*publication) volumeCondition {
	var c volumeCondition
	if st.Abnormal {
		c.entries = append(c.entries, healthEntry{csi.VolumeHealthErrorType_DEGRADED, "VolumeDamaged", st.Message})
	} else {
		c.note = st.Message
	}
	for _, p := range pubs {
		if msg := s.checkPublication(ctx, p); msg != "" {
			c.entries = append(c.entries, healthEntry{csi.VolumeHealthErrorType_INACCESSIBLE, "PublicationBroken", msg})
		}
	}
	return c
}

// legacyConditionField is NodeGetVolumeStatsResponse's field 2, the
// VolumeCondition that CSI 1.13 removed but the kubelet (built against an
// older spec) still reads to report abnormal volumes. It is written as an
// unknown field, which the protobuf runtime sends on the wire unchanged.
const legacyConditionField = 2

// legacyVolumeCondition is the old NodeServiceCapability VOLUME_CONDITION
// (value 4), which tells such a kubelet to look at field 2.
const legacyVolumeCondition csi.NodeServiceCapability_RPC_Type = 4

func setLegacyCondition(resp *csi.NodeGetVolumeStatsResponse, c volumeCondition) {
	var inner []byte
	if c.abnormal() {
		inner = protowire.AppendTag(inner, 1, protowire.VarintType)
		inner = protowire.AppendVarint(inner, 1)
	}
	inner = protowire.AppendTag(inner, 2, protowire.BytesType)
	inner = protowire.AppendString(inner, c.message())
	var field []byte
	field = protowire.AppendTag(field, legacyConditionField, protowire.BytesType)
	field = protowire.AppendBytes(field, inner)
	resp.ProtoReflect().SetUnknown(field)
}

// checkPublication says what is wrong with publication p, or "".
func (s *Server) checkPublication(ctx context.Context, p *publication) string {
	mode, source, err := s.Volumes.Locate(ctx, p.VolumeID)
	if err != nil {
		return fmt.Sprintf("volume data missing: %v", err)
	}
	if mode == volume.Filesystem {
		same, err := sameFile(source, p.TargetPath)
		if err != nil || !same {
			return fmt.Sprintf("the bind mount at %s is gone", p.TargetPath)
		}
		return ""
	}
	d := openRecordedLoop(p, source)
	if d == nil {
		return fmt.Sprintf("loop device %d is detached or no longer serves this volume's image", p.Loop.Number)
	}
	defer d.Close()
	if !isBlockNode(p.TargetPath, p.Loop.Rdev) {
		return fmt.Sprintf("the device node at %s is missing or names another device", p.TargetPath)
	}
	return ""
}

// NodeExpandVolume makes a published volume show the size the volume layer
// already gave it (ControllerExpandVolume or the resizer grow the image or
// quota): loop devices of a block volume re-read their image's size. A
// filesystem volume needs nothing on the node: the quota is the size. It
// returns the capacity now in effect, and is idempotent.
func (s *Server) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := checkCapability(c); err != nil {
			return nil, err
		}
	}
	if req.GetCapacityRange().GetRequiredBytes() < 0 || req.GetCapacityRange().GetLimitBytes() < 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity_range bytes must not be negative")
	}
	unlock := s.locks.Lock(volumeKey(id))
	defer unlock()
	st, err := s.Volumes.Stat(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	p := s.store.get(path)
	if p == nil || p.VolumeID != id {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %q", id, path)
	}
	if req := req.GetCapacityRange().GetRequiredBytes(); req > st.CapacityBytes {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, %d requested: expand it through the controller first", id, st.CapacityBytes, req)
	}
	if st.Mode == volume.Filesystem {
		return &csi.NodeExpandVolumeResponse{CapacityBytes: st.CapacityBytes}, nil
	}
	_, image, err := s.Volumes.Locate(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	capacity := st.CapacityBytes
	for _, pub := range s.store.forVolume(id) {
		d := openRecordedLoop(pub, image)
		if d == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "publication at %s has lost its loop device; republish it", pub.TargetPath)
		}
		err := d.RefreshSize()
		var size uint64
		if err == nil {
			size, err = d.Size()
		}
		d.Close()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "refreshing the size of the loop device at %s: %v", pub.TargetPath, err)
		}
		capacity = min(capacity, int64(size))
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: capacity}, nil
}

// NodeGetCapabilities: no staging (publishing is one step), stats,
// expansion, the single-writer access mode (ReadWriteOncePod, enforced per
// node), volume health, and the pre-1.13 volume condition for kubelets
// built against an older spec.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		legacyVolumeCondition,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo reports the node name as node ID and the hostname topology
// key, which the provisioner's PV node affinity also uses.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.NodeName,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{names.TopologyKeyHostname: s.NodeName}},
	}, nil
}
