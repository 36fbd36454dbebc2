package main

import (
	"context"
	"fmt"
	"time"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/csi"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/volumehealth"
	"source.plinth.dev/pkg/supervisor"
)

// services lists the node's services, started by the root once the data
// directory is ready. This is where the node is composed: a service package
// is wired in with one entry, built from the options it needs and the Env
// the root hands over. tree is the node's placed tree, the one the root
// hands over as Env.Root: what can be built from it is built here, before
// the tree starts, so that a wiring mistake ends plinth-node at start
// instead of failing every restart of a runnable.
//
// The Kubernetes service owns the node's one volume.Manager and hands it to
// every child that touches volumes. The CSI plugin is one of those children
// rather than a service of its own because the Manager's per-volume locks
// only work within one Manager: the provisioner deleting a volume and the
// CSI plugin publishing it must serialise on the same lock.
//
// m is the node's metrics (nil without --metrics-address), handed to the
// Kubernetes service and the CSI plugin.
func services(o *options, tree *localstorage.Root, booted *bootedNode, m *metrics.Metrics) ([]core.Service, error) {
	var svcs []core.Service
	if booted != nil {
		svcs = append(svcs, booted.kubeletService())
	}
	// An empty Kubeconfig makes the service use the in-cluster
	// configuration (kubernetes.Service).
	if o.kubeconfig != "" || o.inCluster {
		registrar, err := csi.NewRegistrar(&tree.Kubelet)
		if err != nil {
			return nil, fmt.Errorf("wiring the CSI plugin: %w", err)
		}
		svcs = append(svcs, kubernetes.NodeService(kubernetes.Options{
			Kubeconfig:              o.kubeconfig,
			QPS:                     float32(o.kubeAPIQPS),
			Burst:                   o.kubeAPIBurst,
			OrphanGracePeriod:       o.orphanGracePeriod,
			CapacityNamespace:       o.capacityNamespace,
			TestOnlyNoOrphanRemoval: o.testOnlyNoOrphanRemoval,
			RemovedNodeGracePeriod:  o.removedNodeGracePeriod,
			Extra: map[string]func(kubernetes.Clients, *core.Env, *volume.Manager) supervisor.Runnable{
				"csi": csiPlugin(registrar, o.volumeHealthInterval, o.volumeAuditInterval, m),
			},
			Metrics: m,
		}))
	}
	return svcs, nil
}

// csiPlugin is the CSI node plugin of a node: it serves the plugin socket
// in the kubelet's plugins directory and registers it with the kubelet
// through registrar (child "server"; the kubelet is its only caller), and
// watches the health of the node's volumes through it, reporting changes
// as Events on their claims (child "volume-health") every healthInterval;
// the same child walks the filesystem volumes every auditInterval for
// files moved out of their project quota. Its calls, the abnormal volumes
// and the audit's findings are counted in m.
func csiPlugin(registrar *csi.Registrar, healthInterval, auditInterval time.Duration, m *metrics.Metrics) func(kubernetes.Clients, *core.Env, *volume.Manager) supervisor.Runnable {
	return func(clients kubernetes.Clients, env *core.Env, vols *volume.Manager) supervisor.Runnable {
		srv, err := csi.NewServer(csi.Config{
			Volumes:   vols,
			Kubelet:   &env.Root.Kubelet,
			State:     &env.Root.Ephemeral.CSI,
			NodeName:  env.NodeName,
			Registrar: registrar,
			Metrics:   m,
		})
		if err != nil {
			// The volume manager exists only once the tree runs, so the
			// server is built here; everything else it is built from was
			// checked before the tree started (by services and core.Root).
			return func(context.Context) error { return err }
		}
		health, err := kubernetes.VolumeHealth(clients, kubernetes.Health{
			NodeName:      env.NodeName,
			Checker:       volumehealth.CSI(srv),
			Interval:      healthInterval,
			Auditor:       vols,
			AuditInterval: auditInterval,
			Metrics:       m,
		})
		if err != nil {
			return func(context.Context) error { return err }
		}
		return func(ctx context.Context) error {
			if err := supervisor.RunGroup(ctx, map[string]supervisor.Runnable{
				"server":        srv.Run,
				"volume-health": health,
			}); err != nil {
				return fmt.Errorf("starting the CSI plugin: %w", err)
			}
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		}
	}
}
