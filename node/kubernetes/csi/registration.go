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
	// socket is the registration socket.
	socket localstorage.Socket
	// endpoint is the CSI socket the kubelet is told about.
	endpoint string
	// backoff is the first wait before re-creating the socket after a
	// failed registration, doubling up to a minute.
	backoff time.Duration
}

// SupportedCSIVersions are the CSI versions announced to the kubelet.
var SupportedCSIVersions = []string{"1.0.0"}

// NewRegistrar returns the Registrar of the driver's sockets in kubelet,
// which must be placed. Both socket paths are worked out here, so that one
// the kernel cannot bind (too long) fails where the node is composed.
func NewRegistrar(kubelet *localstorage.KubeletDirectory) (*Registrar, error) {
	if kubelet == nil || !kubelet.Placed() {
		return nil, errors.New("creating registrar: a placed kubelet directory is required")
	}
	sock, err := kubelet.PluginsRegistry.Registration(names.DriverName)
	if err != nil {
		return nil, fmt.Errorf("creating registrar: %w", err)
	}
	endpoint, err := Socket(kubelet)
	if err != nil {
		return nil, fmt.Errorf("creating registrar: %w", err)
	}
	return &Registrar{socket: sock, endpoint: endpoint, backoff: time.Second}, nil
}

// Run serves registration until ctx ends (a supervisor runnable).
func (r *Registrar) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	sock := &r.socket
	backoff := r.backoff
	for {
		l, err := Listen(sock.FullPath())
		if err != nil {
			return err
		}
		// A rejected registration ends this socket's server early, by
		// its own context, and says why on failed.
		failed := make(chan string, 1)
		sctx, reject := context.WithCancel(ctx)
		g := grpc.NewServer()
		registerapi.RegisterRegistrationServer(g, &registration{endpoint: r.endpoint, failed: failed, reject: reject})
		log.Infof("registration socket %s ready for the kubelet", sock.FullPath())
		err = supervisor.ServeGRPC(sctx, g, l)
		reject()
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), sock.Remove())
		}
		var msg string
		select {
		case msg = <-failed:
		default:
			return errors.Join(fmt.Errorf("serving registration: %w", err), sock.Remove())
		}
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

type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
	failed   chan<- string
	// reject stops the server of the socket once the kubelet has
	// rejected the registration.
	reject context.CancelFunc
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
		r.reject()
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
