package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
)

// copySource is the volume_content_source of a CreateVolume: a snapshot or
// a volume of this node that the new volume is a copy-on-write copy of
// (volume.FromSnapshot, volume.FromVolume). The engine decides the rest:
// the copy has its source's mode and at least its size, and a volume of
// the same ID made from something else is ErrExists.
type copySource struct {
	// kind and id name the source in messages: "snapshot" or "volume".
	kind, id string
	option   volume.CreateOption
}

// contentSource reads src; nil means an empty volume. A source is refused
// (InvalidArgument, as the spec says for a source the plugin cannot
// create from) where the data filesystem makes no copy-on-write copies.
func (c *controller) contentSource(src *csi.VolumeContentSource) (*copySource, error) {
	var s copySource
	switch {
	case src == nil:
		return nil, nil
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		if id == "" {
			return nil, status.Error(codes.InvalidArgument, "volume_content_source: snapshot.snapshot_id is required")
		}
		if err := volume.ValidateSnapshotID(id); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume_content_source: snapshot_id: %v", err)
		}
		s = copySource{kind: "snapshot", id: id, option: volume.FromSnapshot(id)}
	case src.GetVolume() != nil:
		id := src.GetVolume().GetVolumeId()
		if id == "" {
			return nil, status.Error(codes.InvalidArgument, "volume_content_source: volume.volume_id is required")
		}
		if err := volume.ValidateID(id); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume_content_source: volume_id: %v", err)
		}
		s = copySource{kind: "volume", id: id, option: volume.FromVolume(id)}
	default:
		return nil, status.Error(codes.InvalidArgument, "volume_content_source names neither a snapshot nor a volume")
	}
	if err := c.s.cfg.Volumes.CopyOnWriteError(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume_content_source: this node cannot make a volume from a %s: %v: %v", s.kind, volume.ErrCopyUnsupported, err)
	}
	return &s, nil
}

// size is the source's size: the least size of a volume made from it, and
// the size of one made without a capacity_range.
func (s *copySource) size(ctx context.Context, m *volume.Manager) (int64, error) {
	if s.kind == "snapshot" {
		snap, err := m.GetSnapshot(ctx, s.id)
		if err != nil {
			return 0, s.status(err)
		}
		return snap.SizeBytes, nil
	}
	st, err := m.Stat(ctx, s.id)
	if err != nil {
		return 0, s.status(err)
	}
	return st.CapacityBytes, nil
}

// status is the gRPC status of err, an error of creating a volume from s.
// NotFound can only be about the source (a new volume is not found by
// definition), so its message says so.
func (s *copySource) status(err error) error {
	err = statusFromVolume(err)
	if status.Code(err) == codes.NotFound {
		return status.Errorf(codes.NotFound, "volume_content_source: %s %s does not exist: %s", s.kind, s.id, status.Convert(err).Message())
	}
	return err
}
