package kubernetes

import (
	"context"
	"fmt"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/kubernetes/csi"
	"source.plinth.dev/node/kubernetes/volumehealth"
	"source.plinth.dev/pkg/supervisor"
)

// HealthServiceName is the runnable name of the volume health monitor in
// the node's supervision tree.
const HealthServiceName = "volume-health"

// HealthService watches the health of the node's volumes and reports
// changes as Events on their claims and PVs, and puts files moved out of a
// volume's project quota back in (volumehealth.Monitor). It asks the CSI
// plugin about each volume through the plugin's socket in the kubelet's
// plugins directory, as the kubelet does: the plugin is a sibling service,
// and a check made before it listens waits for it (or for the monitor to
// stop) rather than report a healthy volume as broken.
func HealthService(o Options) core.Service {
	return core.Service{
		Name: HealthServiceName,
		Runnable: func(env *core.Env) supervisor.Runnable {
			return func(ctx context.Context) error { return o.runHealth(ctx, env) }
		},
	}
}

// runHealth is one start of HealthService.
func (o *Options) runHealth(ctx context.Context, env *core.Env) error {
	socket, err := csi.Socket(&env.Root.Kubelet)
	if err != nil {
		return fmt.Errorf("volume health: %w", err)
	}
	// Checks wait for the plugin to listen rather than fail while it starts.
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		return fmt.Errorf("volume health: connecting to the CSI plugin: %w", err)
	}
	defer conn.Close()
	clients, _, err := o.connect(env.NodeName)
	if err != nil {
		return err
	}
	m, err := volumehealth.New(volumehealth.Config{
		Base:          o.base(clients, env.NodeName),
		Checker:       volumehealth.CSI(csispec.NewNodeClient(conn)),
		Interval:      o.VolumeHealthInterval,
		Auditor:       env.Volumes,
		AuditInterval: o.VolumeAuditInterval,
	})
	if err != nil {
		return err
	}
	return m.Run(ctx)
}
