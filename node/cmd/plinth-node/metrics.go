package main

import (
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// endpoint is the metrics and health endpoint of one plinth-node process
// (--metrics-address): the process's one registry, the metrics registered
// with it, and the listener they are served on.
type endpoint struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	l       net.Listener
}

// openEndpoint creates the registry and metrics and listens on addr. An
// empty addr means no endpoint: the nil endpoint's metrics are nil, which
// every part of the node takes as "count nothing".
func openEndpoint(addr string) (*endpoint, error) {
	if addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	// The Go runtime and the process (CPU, memory, open files), so a leak
	// in the node agent shows on the same endpoint as its work.
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	l, err := metrics.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &endpoint{reg: reg, metrics: m, l: l}, nil
}

// Metrics returns the endpoint's metrics (nil without an endpoint).
func (e *endpoint) Metrics() *metrics.Metrics {
	if e == nil {
		return nil
	}
	return e.metrics
}

// supervisorOptions are the options that connect a supervisor to the
// endpoint: its restarts are counted.
func (e *endpoint) supervisorOptions() []supervisor.Option {
	if e == nil {
		return nil
	}
	return []supervisor.Option{supervisor.WithRestartHook(e.metrics.Restarted)}
}

// serve serves the endpoint, reporting on sup, until ctx ends; the
// returned channel is closed when it has stopped. Failures are logged:
// the node keeps running without its endpoint rather than stop its
// volumes for it.
func (e *endpoint) serve(ctx context.Context, sup *supervisor.Supervisor, log logtree.LeveledLogger) <-chan struct{} {
	done := make(chan struct{})
	if e == nil {
		close(done)
		return done
	}
	log.Infof("serving metrics and health on http://%s (/metrics, /healthz, /readyz)", e.l.Addr())
	go func() {
		defer close(done)
		if err := metrics.Serve(ctx, e.l, metrics.Handler(e.reg, sup.Status)); err != nil {
			log.Errorf("%v", err)
		}
	}()
	return done
}
