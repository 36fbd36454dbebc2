package main

import (
	"source.plinth.dev/node/core"
	"source.plinth.dev/node/kubernetes"
)

// services lists the node's services, started by the root once the data
// directory is ready. This is where the node is composed: a service package
// is wired in with one entry, built from the options it needs and the Env
// the root hands over, e.g.
//
//	{Name: "kubernetes", Runnable: func(env *core.Env) supervisor.Runnable {
//		svc := &kubernetes.Service{Kubeconfig: o.kubeconfig, NodeName: env.NodeName, ...}
//		return svc.Run
//	}}
//
// where the volume layer takes env.Root.Data, env.Data.QuotaProbeError()
// and env.Data.AllowUnenforcedCapacity(), and the CSI plugin
// env.Root.Kubelet and env.Root.Ephemeral.CSI.
func services(o *options) []core.Service {
	var svcs []core.Service
	if o.kubeconfig != "" {
		svcs = append(svcs, kubernetes.NodeService(kubernetes.Options{
			Kubeconfig:        o.kubeconfig,
			QPS:               float32(o.kubeAPIQPS),
			Burst:             o.kubeAPIBurst,
			OrphanGracePeriod: o.orphanGracePeriod,
		}))
	}
	return svcs
}
