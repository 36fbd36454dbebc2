package csi

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/classparams"
)

// The snapshot RPCs of the development Controller service present the
// engine's snapshots (node/core/volume, snapshot.go) as CSI snapshots. A
// CSI snapshot ID is the engine's snapshot ID, which is also what the node
// writes as a VolumeSnapshotContent's snapshot handle, so a snapshot made
// here and one made by the node in a cluster are the same kind of thing.
// A snapshot is made in one call, so every snapshot these RPCs report is
// ready to use.

// SnapshotIDForName maps a CreateSnapshot name to a snapshot ID, the same
// one on every call (which makes CreateSnapshot idempotent), as
// VolumeIDForName does for volumes: a name that is a valid snapshot ID
// (the csi-snapshotter's "snapshot-<uid>") is used as is; any other name
// is hashed.
func SnapshotIDForName(name string) string {
	return idForName(name, volume.ValidateSnapshotID)
}

func (c *controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	vid := req.GetSourceVolumeId()
	if vid == "" {
		return nil, status.Error(codes.InvalidArgument, "source_volume_id is required")
	}
	if err := volume.ValidateID(vid); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "source_volume_id: %v", err)
	}
	// The snapshot class's parameters, read as the node's snapshot
	// controller reads them.
	p, err := classparams.ParseSnapshot(ownParameters(req.GetParameters()))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "parameters: %v", err)
	}
	// A snapshot is usable only on this node, where its source is.
	if !c.reachable(req.GetAccessibilityRequirements()) {
		return nil, status.Errorf(codes.ResourceExhausted, "accessibility_requirements exclude node %s, the only node a snapshot of this plugin is usable from", c.s.cfg.NodeName)
	}
	snap, err := c.s.cfg.Volumes.CreateSnapshot(ctx, vid, SnapshotIDForName(req.GetName()), p.SnapshotOptions()...)
	if errors.Is(err, volume.ErrCopyUnsupported) {
		// ControllerGetCapabilities does not offer snapshots then.
		return nil, status.Error(codes.Unimplemented, err.Error())
	}
	if err != nil {
		return nil, statusFromVolume(err)
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(snap)}, nil
}

func (c *controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	if err := volume.ValidateSnapshotID(id); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "snapshot_id: %v", err)
	}
	if err := c.s.cfg.Volumes.DeleteSnapshot(ctx, id); err != nil {
		return nil, statusFromVolume(err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots pages through the snapshots in the order of their IDs. A
// page's next_token is the ID of the first snapshot of the next page, and
// a page starts at the first snapshot whose ID is not below its
// starting_token; so a snapshot deleted between two calls moves no other
// snapshot to another page, and a token is still good after the snapshot
// it names is gone.
func (c *controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries %d is negative", req.GetMaxEntries())
	}
	start := req.GetStartingToken()
	if start != "" && volume.ValidateSnapshotID(start) != nil {
		return nil, status.Errorf(codes.Aborted, "starting_token %q is no token this plugin gives; start again without one", start)
	}
	// The engine's list is sorted by ID and takes no locks, so a snapshot
	// being made is not waited for (nor listed: it is not cut yet).
	all, err := c.s.cfg.Volumes.ListSnapshots(ctx)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, s := range all {
		switch {
		case s.ID < start,
			req.GetSnapshotId() != "" && s.ID != req.GetSnapshotId(),
			req.GetSourceVolumeId() != "" && s.SourceVolumeID != req.GetSourceVolumeId():
			continue
		}
		if n := req.GetMaxEntries(); n > 0 && len(resp.Entries) == int(n) {
			resp.NextToken = s.ID
			break
		}
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(s)})
	}
	return resp, nil
}

// csiSnapshot describes s in CSI terms. Its size is the source volume's
// when it was made: the least size of a volume made from it.
func csiSnapshot(s volume.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     s.ID,
		SourceVolumeId: s.SourceVolumeID,
		SizeBytes:      s.SizeBytes,
		CreationTime:   timestamppb.New(s.CreatedAt),
		ReadyToUse:     s.ReadyToUse,
	}
}
