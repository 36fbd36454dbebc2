package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"source.plinth.dev/node/kubernetes/names"
)

// GetPluginInfo names the driver (names.DriverName, the name in every
// StorageClass and PV of ours).
func (s *Server) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: names.DriverName, VendorVersion: Version}, nil
}

// GetPluginCapabilities advertises the Controller service (and with it
// topology: volumes are reachable from this node only) only when the
// development controller is enabled; in a cluster the provisioner does the
// controller's work.
func (s *Server) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if s.cfg.Controller {
		for _, t := range []csi.PluginCapability_Service_Type{
			csi.PluginCapability_Service_CONTROLLER_SERVICE,
			csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
		} {
			caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
				Service: &csi.PluginCapability_Service{Type: t},
			}})
		}
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE},
		}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports ready once Start has reconciled the publication records.
func (s *Server) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(s.started.Load())}, nil
}
