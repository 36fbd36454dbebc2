package csi

import (
	"context"
	"errors"
	"fmt"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/pkg/supervisor"
)

// ServiceName is the runnable name of the CSI plugin in the node's
// supervision tree.
const ServiceName = "csi"

// Options are the settings of the plugin as a service of the node.
type Options struct {
	// Endpoint and ControllerEndpoint: see Config. plinth-node leaves
	// both empty; csi-serve sets them from its flags.
	Endpoint           string
	ControllerEndpoint string
	// Register serves the kubelet's plugin registration socket.
	Register bool
	// Metrics, if set, counts and times the calls that do volume work.
	Metrics *metrics.Metrics
}

// NodeService is the CSI plugin as a service of the node whose kubelet
// directory is kubelet (placed): each start builds a Server over the node's
// volume engine (env.Volumes), that kubelet directory and the node's
// ephemeral CSI state, and runs it (Server.Run). What can be checked
// before the node runs (the sockets' paths) is checked here, so that a
// wiring mistake ends plinth-node at start instead of failing every
// restart of the service.
func NodeService(o Options, kubelet *localstorage.KubeletDirectory) (core.Service, error) {
	if kubelet == nil || !kubelet.Placed() {
		return core.Service{}, errors.New("wiring the CSI plugin: a placed kubelet directory is required")
	}
	// NewServer works the plugin's socket out each start; a path the
	// kernel cannot bind (too long) fails here instead.
	if _, err := Socket(kubelet); err != nil {
		return core.Service{}, fmt.Errorf("wiring the CSI plugin: %w", err)
	}
	var registrar *Registrar
	if o.Register {
		var err error
		if registrar, err = NewRegistrar(kubelet); err != nil {
			return core.Service{}, fmt.Errorf("wiring the CSI plugin: %w", err)
		}
	}
	return core.Service{
		Name: ServiceName,
		Runnable: func(env *core.Env) supervisor.Runnable {
			return func(ctx context.Context) error {
				srv, err := o.server(env, registrar)
				if err != nil {
					return err
				}
				return srv.Run(ctx)
			}
		},
	}, nil
}

// server builds the Server of one start from env.
func (o *Options) server(env *core.Env, registrar *Registrar) (*Server, error) {
	return NewServer(Config{
		Volumes:            env.Volumes,
		Kubelet:            &env.Root.Kubelet,
		State:              &env.Root.Ephemeral.CSI,
		NodeName:           env.NodeName,
		Endpoint:           o.Endpoint,
		Controller:         o.ControllerEndpoint != "",
		ControllerEndpoint: o.ControllerEndpoint,
		Registrar:          registrar,
		Metrics:            o.Metrics,
	})
}
