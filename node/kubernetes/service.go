package kubernetes

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/noderemoval"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/node/kubernetes/resizer"
	"source.plinth.dev/node/kubernetes/snapshots"
	"source.plinth.dev/pkg/supervisor"
)

// ServiceName is the runnable name of the controllers' service in the
// node's supervision tree.
const ServiceName = "kubernetes"

// NodeService is the node's controllers, as one service of the node: each
// start connects to the API server, checks the node agent's identity and
// starts the controllers over the node's volume engine (env.Volumes).
func NodeService(o Options) core.Service {
	return core.Service{
		Name:     ServiceName,
		Runnable: func(env *core.Env) supervisor.Runnable { return (&service{o: o, env: env}).run },
	}
}

// service is one start of NodeService.
type service struct {
	o   Options
	env *core.Env
}

// run connects to the API server, starts the controllers and runs until
// ctx ends.
func (s *service) run(ctx context.Context) error {
	clients, cfg, err := s.o.connect(s.env.NodeName)
	if err != nil {
		return err
	}
	log := supervisor.Logger(ctx)
	if err := s.o.checkIdentity(ctx, clients.Client, s.env.NodeName, log); err != nil {
		return err
	}
	base := s.o.base(clients, s.env.NodeName)
	if err := waitForDataDirectory(ctx, base, s.env.Volumes, log); err != nil {
		return err
	}
	// One claim informer and one PV informer for the whole process: each
	// claim change in the cluster then reaches this node once, not once
	// per controller.
	if base.Shared, err = controller.NewShared(base); err != nil {
		return err
	}
	sharedCtx, stopShared := context.WithCancel(ctx)
	var shared sync.WaitGroup
	shared.Go(func() { base.Shared.Run(sharedCtx) })
	defer func() {
		stopShared()
		shared.Wait()
	}()
	children, err := s.controllers(base, clients)
	if err != nil {
		return err
	}
	if err := supervisor.RunGroup(ctx, children); err != nil {
		return fmt.Errorf("starting Kubernetes children: %w", err)
	}
	log.Infof("connected to %s as node %s (QPS %v, burst %d)", cfg.Host, s.env.NodeName, cfg.QPS, cfg.Burst)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// controllers builds the service's children from base. A controller that
// refuses its configuration fails the start, with the error that says why.
func (s *service) controllers(base controller.Base, clients Clients) (map[string]supervisor.Runnable, error) {
	vols := s.env.Volumes
	prov, err := provisioner.New(provisioner.Config{
		Base:                    base,
		Volumes:                 vols,
		Snapshots:               clients.Snapshots,
		OrphanGracePeriod:       s.o.OrphanGracePeriod,
		OrphanRetention:         s.o.OrphanRetention,
		TestOnlyNoOrphanRemoval: s.o.TestOnlyNoOrphanRemoval,
	})
	if err != nil {
		return nil, err
	}
	resize, err := resizer.New(resizer.Config{Base: base, Volumes: vols})
	if err != nil {
		return nil, err
	}
	removal, err := noderemoval.New(noderemoval.Config{Base: base, GracePeriod: s.o.RemovedNodeGracePeriod})
	if err != nil {
		return nil, err
	}
	snap, err := snapshots.New(snapshots.Config{Base: base, Snapshots: clients.Snapshots, Volumes: vols})
	if err != nil {
		return nil, err
	}
	capacityNamespace := cmp.Or(s.o.CapacityNamespace, capacity.DefaultNamespace)
	publisher, err := capacity.New(capacity.Config{Base: base, Volumes: vols, Namespace: capacityNamespace})
	if err != nil {
		return nil, err
	}
	return map[string]supervisor.Runnable{
		"cluster-objects": func(ctx context.Context) error {
			// Failing here (API server not up yet, no rights) is retried by
			// the supervisor with backoff; provisioning does not wait for
			// it, since claims of an existing class can be served anyway.
			if err := clusterobjects.Ensure(ctx, base.Client, capacityNamespace, supervisor.Logger(ctx)); err != nil {
				return err
			}
			supervisor.Signal(ctx, supervisor.SignalDone)
			return nil
		},
		"provisioner":  prov.Run,
		"resizer":      resize.Run,
		"snapshots":    snap.Run,
		"capacity":     publisher.Run,
		"node-removal": removal.Run,
	}, nil
}
