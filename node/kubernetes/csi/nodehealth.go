package csi

import (
	"context"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"source.plinth.dev/node/core/volume"
)

// NodeGetVolumeHealth is CSI 1.13's successor of the volume condition: the
// same findings, as health entries. Without a publish path it checks every
// publication of the volume; the volume health monitor
// (node/kubernetes/volumehealth) asks it that way.
func (s *Server) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	// Under the volume's lock, so that a publication being made or
	// removed right now is not mistaken for a broken one.
	unlock := s.locks.Lock(volumeKey(id))
	defer unlock()
	st, err := s.cfg.Volumes.Stat(ctx, id)
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
	mode, source, err := s.cfg.Volumes.Locate(ctx, p.VolumeID)
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
	if p.Loop == nil {
		return "its publication record names no loop device"
	}
	d, state := inspectLoop(p, source)
	switch state {
	case loopFree:
		return fmt.Sprintf("loop device %d was detached behind the node's back; its number stays reserved for this publication, "+
			"and the node binds the volume's image to it again at the next publish or restart", p.Loop.Number)
	case loopTaken:
		return fmt.Sprintf("loop device %d now serves another file; its number stays reserved for this publication until it is unpublished", p.Loop.Number)
	}
	defer d.Close()
	if !isBlockNode(p.TargetPath, p.Loop.Rdev) {
		return fmt.Sprintf("the device node at %s is missing or names another device", p.TargetPath)
	}
	return ""
}
