package csi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Registrar serves the kubelet's plugin registration API on
// plugins_registry/<driver>-reg.sock, which is how the kubelet learns that
// the driver exists and where its CSI socket is.
//
// The kubelet watches the registry directory and tries a socket once, when
// it appears. If registration fails (the kubelet calls
// NotifyRegistrationStatus with registered=false), waiting on the same
// socket would wait forever, so the Registrar removes the socket and
// creates it again after a backoff, which makes the kubelet try again.
type Registrar struct {
	// Kubelet is the kubelet's root directory.
	Kubelet *localstorage.KubeletDirectory
	// Log receives log lines; nil means the supervisor's logger.
	Log logtree.LeveledLogger
	// Backoff is the first wait before re-creating the socket after a
	// failed registration (doubling up to a minute); 0 means a second.
	Backoff time.Duration
}

// SupportedCSIVersions are the CSI versions announced to the kubelet.
var SupportedCSIVersions = []string{"1.0.0"}

// Run serves registration until ctx ends (a supervisor runnable).
func (r *Registrar) Run(ctx context.Context) error {
	log := r.Log
	if log == nil {
		log = supervisor.Logger(ctx)
	}
	sock, err := r.Kubelet.PluginsRegistry.Registration(names.DriverName)
	if err != nil {
		return err
	}
	plugin, err := r.Kubelet.Plugins.Driver(names.DriverName)
	if err != nil {
		return err
	}
	backoff := r.Backoff
	if backoff == 0 {
		backoff = time.Second
	}
	healthy := false
	for {
		failed := make(chan string, 1)
		l, err := Listen(sock.FullPath())
		if err != nil {
			return err
		}
		g := grpc.NewServer()
		registerapi.RegisterRegistrationServer(g, &registration{endpoint: plugin.CSISocket.FullPath(), failed: failed})
		serveErr := make(chan error, 1)
		go func() { serveErr <- g.Serve(l) }()
		log.Infof("registration socket %s ready for the kubelet", sock.FullPath())
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
		select {
		case <-ctx.Done():
			stopGracefully(g)
			return errors.Join(ctx.Err(), sock.Remove())
		case err := <-serveErr:
			return errors.Join(fmt.Errorf("serving registration: %w", err), sock.Remove())
		case msg := <-failed:
			stopGracefully(g)
			if err := sock.Remove(); err != nil {
				return err
			}
			log.Warningf("kubelet rejected the registration of %s: %s; re-creating %s in %v so it tries again", names.DriverName, msg, sock.FullPath(), backoff)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
		}
	}
}

// stopGracefully lets in-flight calls (the kubelet's notification) finish,
// but not for long.
func stopGracefully(g *grpc.Server) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		g.Stop()
	}
}

type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
	failed   chan<- string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              names.DriverName,
		Endpoint:          r.endpoint,
		SupportedVersions: SupportedCSIVersions,
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.GetPluginRegistered() {
		select {
		case r.failed <- st.GetError():
		default:
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
