package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/classparams"
	"source.plinth.dev/node/kubernetes/names"
)

// controller is the development-only Controller service of `plinth-node
// csi-serve --controller-endpoint`. It lets csi-sanity and operators drive
// the whole CSI lifecycle without a cluster; in a cluster the provisioner
// and resizer do this work through the same volume.Manager, so the two
// cannot disagree about what a volume is.
type controller struct {
	csi.UnimplementedControllerServer
	s *Server
}

// DefaultVolumeSize is the size of a volume created without a capacity
// range.
const DefaultVolumeSize = 1 << 30

// VolumeIDForName maps a CreateVolume name to a volume ID, the same one on
// every call (which makes CreateVolume idempotent). A name that is a valid
// volume ID (the external-provisioner's "pvc-<uid>") is used as is; any
// other name (longer, upper case, other characters) is hashed.
func VolumeIDForName(name string) string {
	return idForName(name, volume.ValidateID)
}

// idForName is name if valid accepts it, else "csi-" and the first half of
// its SHA-256 in hex: 36 characters, a valid ID of either kind.
func idForName(name string, valid func(string) error) string {
	if valid(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "csi-" + hex.EncodeToString(sum[:16])
}

// parameterPrefix marks parameters the CO adds for itself; they are ignored.
const parameterPrefix = "csi.storage.k8s.io/"

// checkParameters reads the parameters of a CreateVolume as the
// provisioner reads a StorageClass's (classparams.Parse), ignoring the
// CO's own (parameterPrefix).
func checkParameters(params map[string]string) (classparams.Params, error) {
	p, err := classparams.Parse(ownParameters(params))
	if err != nil {
		return classparams.Params{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return p, nil
}

// ownParameters are params without the CO's own (parameterPrefix).
func ownParameters(params map[string]string) map[string]string {
	own := make(map[string]string, len(params))
	for k, v := range params {
		if !strings.HasPrefix(k, parameterPrefix) {
			own[k] = v
		}
	}
	return own
}

// sizeFor picks the size for a capacity range: the required bytes (or the
// default, capped by the limit rounded down), rounded up to
// volume.Alignment, and OutOfRange when the rounding would pass the limit.
func sizeFor(r *csi.CapacityRange, dflt int64) (int64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || limit < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity_range bytes must not be negative")
	}
	if limit > 0 && req > limit {
		return 0, status.Errorf(codes.InvalidArgument, "capacity_range: required_bytes %d exceeds limit_bytes %d", req, limit)
	}
	size := req
	if size == 0 {
		size = dflt
		if limit > 0 {
			size = min(size, limit)
			// Rounding up could pass a limit that is not aligned: take
			// the largest aligned size within it, if there is one.
			if floor := limit / volume.Alignment * volume.Alignment; floor > 0 {
				size = min(size, floor)
			}
		}
	}
	aligned, err := volume.AlignSize(size)
	if err != nil {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: %v", err)
	}
	if limit > 0 && aligned > limit {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: sizes are multiples of %d bytes; %d rounds up to %d, above limit_bytes %d", volume.Alignment, size, aligned, limit)
	}
	return aligned, nil
}

func (c *controller) topology() []*csi.Topology {
	return []*csi.Topology{{Segments: map[string]string{names.TopologyKeyHostname: c.s.cfg.NodeName}}}
}

// reachable reports whether requirements allow this node.
func (c *controller) reachable(req *csi.TopologyRequirement) bool {
	if len(req.GetRequisite()) == 0 {
		return true
	}
	for _, t := range req.GetRequisite() {
		if v, ok := t.GetSegments()[names.TopologyKeyHostname]; ok && v == c.s.cfg.NodeName {
			return true
		}
	}
	return false
}

func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	mode, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, err
	}
	params, err := checkParameters(req.GetParameters())
	if err != nil {
		return nil, err
	}
	if len(req.GetMutableParameters()) > 0 {
		return nil, status.Error(codes.InvalidArgument, "mutable_parameters: this driver takes none")
	}
	src, err := c.contentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	// A new volume gets what the parameters say and records it in its
	// context; a copy gets what they give a copy (CopyOptions) and keeps
	// its source's root directory, so its context records no mode.
	opts, volCtx := params.CreateOptions(mode), params.VolumeAttributes(mode)
	dflt := int64(DefaultVolumeSize)
	if src != nil {
		opts, volCtx = append(params.CopyOptions(), src.option), nil
		if req.GetCapacityRange().GetRequiredBytes() == 0 {
			if dflt, err = src.size(ctx, c.s.cfg.Volumes); err != nil {
				return nil, err
			}
		}
	}
	size, err := sizeFor(req.GetCapacityRange(), dflt)
	if err != nil {
		return nil, err
	}
	if !c.reachable(req.GetAccessibilityRequirements()) {
		return nil, status.Errorf(codes.ResourceExhausted, "accessibility_requirements exclude node %s, the only node this plugin provisions on", c.s.cfg.NodeName)
	}
	v, err := c.s.cfg.Volumes.Create(ctx, VolumeIDForName(req.GetName()), mode, size, opts...)
	if err != nil && src != nil {
		return nil, src.status(err)
	}
	if err != nil {
		return nil, statusFromVolume(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           v.ID,
		CapacityBytes:      v.CapacityBytes,
		VolumeContext:      volCtx,
		AccessibleTopology: c.topology(),
		ContentSource:      req.GetVolumeContentSource(),
	}}, nil
}

func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	unlock := c.s.locks.Lock(volumeKey(id))
	defer unlock()
	if targets := c.s.published(id); len(targets) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published at %s; unpublish it first", id, strings.Join(targets, ", "))
	}
	if err := c.s.cfg.Volumes.Delete(ctx, id); err != nil {
		return nil, statusFromVolume(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c *controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := checkCapability(c); err != nil {
			return nil, err
		}
	}
	size, err := sizeFor(req.GetCapacityRange(), 0)
	if err != nil {
		return nil, err
	}
	v, err := c.s.cfg.Volumes.Expand(ctx, id, size)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	// The volume layer has made the new size visible everywhere: the quota
	// of a filesystem volume is its size, and the loop devices of a block
	// volume re-read the image's size before Expand returns. So no node
	// step is needed, exactly as for the resizer in a cluster.
	return &csi.ControllerExpandVolumeResponse{
		CapacityBytes:         v.CapacityBytes,
		NodeExpansionRequired: false,
	}, nil
}

func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities is required")
	}
	vmode, _, err := c.s.cfg.Volumes.Locate(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	mode, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	if mode != vmode {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s is a %v volume, not %s", id, vmode, describeMode(mode))}, nil
	}
	if _, err := checkParameters(req.GetParameters()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// ControllerGetCapabilities offers snapshots and volumes made from a
// snapshot or a volume only where the data filesystem makes copy-on-write
// copies (volume.Manager.CopyOnWriteError): elsewhere every such call
// would fail.
func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	}
	if c.s.cfg.Volumes.CopyOnWriteError() == nil {
		types = append(types,
			csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
			csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
			csi.ControllerServiceCapability_RPC_CLONE_VOLUME)
	}
	var caps []*csi.ControllerServiceCapability
	for _, t := range types {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}
