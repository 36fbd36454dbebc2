package kubernetes

import (
	"context"
	"fmt"
	"time"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/pkg/supervisor"
)

// ServiceName is the runnable name of the Kubernetes service in the node's
// supervision tree.
const ServiceName = "kubernetes"

// Options are the plinth-node settings of the Kubernetes service.
type Options struct {
	Kubeconfig        string
	QPS               float32
	Burst             int
	OrphanGracePeriod time.Duration
	// CapacityNamespace holds the node's CSIStorageCapacity objects
	// (capacity.DefaultNamespace when empty).
	CapacityNamespace string
	// TestOnlyNoOrphanRemoval is for tests only (see provisioner.Config).
	TestOnlyNoOrphanRemoval bool
	// RemovedNodeGracePeriod: see Service.
	RemovedNodeGracePeriod time.Duration
	// Extra are further children; they are given the shared clients, the
	// node's Env and the node's one volume manager.
	Extra map[string]func(Clients, *core.Env, *volume.Manager) supervisor.Runnable
	// Metrics is the node's metrics (nil: none); see Service.Metrics.
	Metrics *metrics.Metrics
}

// NodeService is the entry plinth-node adds to its services. Each time the
// root starts it, it builds the node's volume manager from the prepared
// data directory and returns the Service's runnable.
func NodeService(o Options) core.Service {
	return core.Service{
		Name: ServiceName,
		Runnable: func(env *core.Env) supervisor.Runnable {
			vols, err := volume.New(volume.Config{
				Data:            &env.Root.Data,
				QuotaError:      env.Data.QuotaProbeError(),
				AllowUnenforced: env.Data.AllowUnenforcedCapacity(),
			})
			if err != nil {
				return func(context.Context) error { return fmt.Errorf("creating volume manager: %w", err) }
			}
			s := &Service{
				Kubeconfig:              o.Kubeconfig,
				QPS:                     o.QPS,
				Burst:                   o.Burst,
				NodeName:                env.NodeName,
				Volumes:                 vols,
				OrphanGracePeriod:       o.OrphanGracePeriod,
				CapacityNamespace:       o.CapacityNamespace,
				TestOnlyNoOrphanRemoval: o.TestOnlyNoOrphanRemoval,
				RemovedNodeGracePeriod:  o.RemovedNodeGracePeriod,
				Extra:                   map[string]Child{},
				Metrics:                 o.Metrics,
			}
			for name, mk := range o.Extra {
				s.Extra[name] = func(c Clients) supervisor.Runnable { return mk(c, env, vols) }
			}
			return s.Run
		},
	}
}
