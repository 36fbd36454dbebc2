package main

import (
	"context"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/csi"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/pkg/supervisor"
)

// services lists the node's services, started by the root once the data
// directory and the volume engine are ready. This is where the node is
// composed: a service package is wired in with one entry, built from the
// options it needs; the root hands each the same Env, with the node's one
// volume.Manager. tree is the node's placed tree, the one the root hands
// over as Env.Root: what can be checked from it is checked here, before
// the tree starts, so that a wiring mistake ends plinth-node at start
// instead of failing every restart of a runnable.
//
// m is the node's metrics (nil without --metrics-address), handed to every
// service that counts something.
func services(o *options, tree *localstorage.Root, booted *bootedNode, m *metrics.Metrics) ([]core.Service, error) {
	var svcs []core.Service
	if booted != nil {
		svcs = append(svcs, booted.kubeletService())
	}
	if m != nil {
		svcs = append(svcs, volumeMetricsService(m))
	}
	// An empty Kubeconfig makes the Kubernetes services use the
	// in-cluster configuration.
	if o.kube.Kubeconfig == "" && !o.inCluster {
		return svcs, nil
	}
	plugin, err := csi.NodeService(csi.Options{Register: true, Metrics: m}, &tree.Kubelet)
	if err != nil {
		return nil, err
	}
	kube := o.kube
	kube.Metrics = m
	return append(svcs, kubernetes.NodeService(kube), plugin, kubernetes.HealthService(kube)), nil
}

// volumeMetricsService reports on the node's volumes in m (a
// metrics.VolumeCollector over env.Volumes) while the node runs.
func volumeMetricsService(m *metrics.Metrics) core.Service {
	return core.Service{
		Name: "volume-metrics",
		Runnable: func(env *core.Env) supervisor.Runnable {
			return func(ctx context.Context) error {
				unwatch, err := m.WatchVolumes(env.Volumes)
				if err != nil {
					return err
				}
				defer unwatch()
				supervisor.Signal(ctx, supervisor.SignalHealthy)
				<-ctx.Done()
				return ctx.Err()
			}
		},
	}
}
