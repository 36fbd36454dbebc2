package main

import (
	"source.plinth.dev/node/core"
	"source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/csi"
	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/supervisor"
)

// services lists the node's services, started by the root once the data
// directory is ready. This is where the node is composed: a service package
// is wired in with one entry, built from the options it needs and the Env
// the root hands over.
//
// The Kubernetes service owns the node's one volume.Manager and hands it to
// every child that touches volumes. The CSI plugin is one of those children
// rather than a service of its own because the Manager's per-volume locks
// only work within one Manager: the provisioner deleting a volume and the
// CSI plugin publishing it must serialise on the same lock.
func services(o *options) []core.Service {
	var svcs []core.Service
	if o.kubeconfig != "" {
		svcs = append(svcs, kubernetes.NodeService(kubernetes.Options{
			Kubeconfig:        o.kubeconfig,
			QPS:               float32(o.kubeAPIQPS),
			Burst:             o.kubeAPIBurst,
			OrphanGracePeriod: o.orphanGracePeriod,
			Extra: map[string]func(kubernetes.Clients, *core.Env, *volume.Manager) supervisor.Runnable{
				"csi": csiPlugin,
			},
		}))
	}
	return svcs
}

// csiPlugin is the CSI node plugin of a node: it serves the plugin socket
// in the kubelet's plugins directory and registers it with the kubelet.
// It needs no API clients: the kubelet is its only caller.
func csiPlugin(_ kubernetes.Clients, env *core.Env, vols *volume.Manager) supervisor.Runnable {
	return (&csi.Server{
		Volumes:      vols,
		Kubelet:      &env.Root.Kubelet,
		State:        &env.Root.Ephemeral.CSI,
		NodeName:     env.NodeName,
		Registration: true,
	}).Run
}
