package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
)

// NodeExpandVolume confirms that a published volume shows the size the
// volume layer gave it. The resizer and ControllerExpandVolume never ask for
// it (volume.Manager.Expand already makes a block volume's loop devices
// re-read the image's size, and a filesystem volume's quota is its size),
// but a CO may call it anyway: loop devices of a block volume re-read their
// image's size once more. It returns the capacity now in effect, and is
// idempotent.
func (s *Server) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	var mode volume.Mode
	if c := req.GetVolumeCapability(); c != nil {
		var err error
		if mode, err = checkCapability(c); err != nil {
			return nil, err
		}
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity_range bytes must not be negative")
	}
	if limit > 0 && required > limit {
		return nil, status.Errorf(codes.OutOfRange, "capacity_range asks for at least %d bytes and at most %d", required, limit)
	}
	unlock := s.locks.Lock(volumeKey(id))
	defer unlock()
	st, err := s.cfg.Volumes.Stat(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	p := s.store.get(path)
	if p == nil || p.VolumeID != id {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %q", id, path)
	}
	if mode != 0 && mode != st.Mode {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is a %v volume, not one for %s access", id, st.Mode, describeMode(mode))
	}
	if required > st.CapacityBytes {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, %d requested: expand it through the controller first", id, st.CapacityBytes, required)
	}
	if limit > 0 && st.CapacityBytes > limit {
		return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, more than the limit of %d: volumes do not shrink", id, st.CapacityBytes, limit)
	}
	if st.Mode == volume.Filesystem {
		return &csi.NodeExpandVolumeResponse{CapacityBytes: st.CapacityBytes}, nil
	}
	_, image, err := s.cfg.Volumes.Locate(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	capacity := st.CapacityBytes
	for _, pub := range s.store.forVolume(id) {
		d, state := inspectLoop(pub, image)
		if state != loopOwn {
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
