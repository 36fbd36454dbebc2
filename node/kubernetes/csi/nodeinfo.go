package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"source.plinth.dev/node/kubernetes/names"
)

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
		NodeId:             s.cfg.NodeName,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{names.TopologyKeyHostname: s.cfg.NodeName}},
	}, nil
}
