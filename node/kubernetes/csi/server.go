// Package csi is Plinth's CSI plugin: the Identity and Node services the
// kubelet calls to publish volumes into pods, the kubelet plugin
// registration server, and a development-only Controller service for the
// standalone `plinth-node csi-serve`.
//
// Everything about a volume's on-disk shape comes from node/core/volume;
// this package only knows how to present a volume at a target path
// (a bind mount for filesystem volumes, a loop device and a device node for
// block volumes) and how to remember that across restarts: each published
// target has a record in the ephemeral CSI state directory, written before
// the mount or device node appears, so after a crash the plugin finds every
// publication it may have made and verifies it instead of trusting it.
//
// Like the volume layer, this package imports nothing from Kubernetes but
// the kubelet's plugin registration API.
package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/keymutex"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Version is reported by GetPluginInfo.
const Version = "0.1.0"

// Config is what a Server is built from: its dependencies, and which
// services it offers.
type Config struct {
	// Volumes is the volume layer the plugin publishes from.
	Volumes *volume.Manager
	// Kubelet is the kubelet's root directory (placed). Target paths must
	// lie below it, and the plugin socket lives in its plugins directory.
	Kubelet *localstorage.KubeletDirectory
	// State is where publication records are kept (placed).
	State *localstorage.CSIStateDirectory
	// NodeName is the node ID reported to the CO and the value of the
	// hostname topology key.
	NodeName string
	// Endpoint is the unix socket Run serves Identity and Node on; empty
	// means the driver's socket in the kubelet's plugins directory, where
	// the kubelet looks.
	Endpoint string
	// Controller enables the development Controller service (csi-serve
	// --controller-endpoint) and advertises it in the plugin capabilities;
	// with ControllerEndpoint set, Run serves it there too.
	Controller         bool
	ControllerEndpoint string
	// Registrar, if set, makes Run also serve the kubelet plugin
	// registration socket (as its child "registration"), started once the
	// CSI socket listens, so the kubelet never learns of a socket that
	// does not answer yet.
	Registrar *Registrar
	// Metrics, if set, counts and times the calls that do volume work
	// (see callOperation).
	Metrics *metrics.Metrics
}

// Server implements the CSI Identity, Node and (optionally) Controller
// services. Build it with NewServer, then either run it as a supervised
// runnable (Run), or call Start once and serve it yourself. Its handlers
// are safe for concurrent use: calls for one volume, and calls for one
// target path, are serialised.
type Server struct {
	cfg Config
	// socket is the CSI socket in the kubelet's plugins directory.
	socket string

	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	// log is the logger given to Start.
	log     logtree.LeveledLogger
	store   store
	holds   holds
	locks   keymutex.Set
	boot    string
	started atomic.Bool
	// readBootID is bootID; tests that simulate a reboot replace it.
	readBootID func() (string, error)
}

// NewServer checks cfg and returns a Server over it. Every dependency is
// checked here, so that a wiring mistake fails where the node is composed
// rather than each time the supervisor restarts the plugin.
func NewServer(cfg Config) (*Server, error) {
	switch {
	case cfg.Volumes == nil:
		return nil, errors.New("creating CSI server: Volumes is required")
	case cfg.Kubelet == nil || !cfg.Kubelet.Placed():
		return nil, errors.New("creating CSI server: Kubelet is required, placed")
	case cfg.State == nil || !cfg.State.Placed():
		return nil, errors.New("creating CSI server: State is required, placed")
	case cfg.NodeName == "":
		return nil, errors.New("creating CSI server: NodeName is required")
	}
	socket, err := Socket(cfg.Kubelet)
	if err != nil {
		return nil, fmt.Errorf("creating CSI server: %w", err)
	}
	return &Server{cfg: cfg, socket: socket, readBootID: bootID}, nil
}

// Socket is the path of the driver's CSI socket in the plugins directory
// of kubelet (placed): where the node's plugin serves, the registrar tells
// the kubelet to call, and volume health asks.
func Socket(kubelet *localstorage.KubeletDirectory) (string, error) {
	plugin, err := kubelet.Plugins.Driver(names.DriverName)
	if err != nil {
		return "", err
	}
	return plugin.CSISocket.FullPath(), nil
}

// Start loads the publication records and brings the node in line with
// them: publications of an earlier boot are cleaned up (their device nodes
// removed, never trusted), current ones are verified and repaired, and
// loop devices over this node's images that no record claims are removed.
// It must run before the first request is served; the server logs to log
// from then on.
func (s *Server) Start(ctx context.Context, log logtree.LeveledLogger) error {
	if log == nil {
		return errors.New("starting CSI server: a logger is required")
	}
	s.log = log
	if err := localstorage.MkdirAll(s.cfg.State); err != nil {
		return fmt.Errorf("starting CSI server: %w", err)
	}
	boot, err := s.readBootID()
	if err != nil {
		return fmt.Errorf("starting CSI server: %w", err)
	}
	s.boot = boot
	s.store.dir = &s.cfg.State.Publications
	problems, err := s.store.load()
	if err != nil {
		return fmt.Errorf("starting CSI server: %w", err)
	}
	for _, p := range problems {
		s.log.Warningf("%s", p)
	}
	s.reconcile(ctx)
	s.started.Store(true)
	return nil
}

// Register adds the node plugin's services to g: Identity and Node.
func (s *Server) Register(g *grpc.Server) {
	csi.RegisterIdentityServer(g, s)
	csi.RegisterNodeServer(g, s)
}

// RegisterController adds Identity and the development Controller service
// to g (csi-serve serves them on their own endpoint). Set Controller so
// Identity advertises it.
func (s *Server) RegisterController(g *grpc.Server) {
	csi.RegisterIdentityServer(g, s)
	csi.RegisterControllerServer(g, &controller{s: s})
}

// NewGRPCServer returns a gRPC server whose every call is logged when it
// fails and whose panics become Internal errors instead of killing the
// node agent.
func (s *Server) NewGRPCServer() *grpc.Server {
	return grpc.NewServer(grpc.UnaryInterceptor(s.intercept))
}

func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "%s panicked: %v", info.FullMethod, r)
		}
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		if op, ok := callOperation(method); ok {
			code := ""
			if err != nil {
				code = status.Code(err).String()
			}
			s.cfg.Metrics.Observe(op, start, code)
		}
		if err != nil {
			s.log.Warningf("%s failed after %v: %v", method, time.Since(start).Round(time.Microsecond), err)
		} else if v := s.log.V(1); v.Enabled() {
			v.Infof("%s ok in %v", method, time.Since(start).Round(time.Microsecond))
		}
	}()
	return handler(ctx, req)
}

// callOperation maps the CSI methods that do volume work to the operation
// they are counted as in the metrics. Other calls (Probe, capabilities,
// GetPluginInfo) are cheap questions and not counted.
func callOperation(method string) (metrics.Operation, bool) {
	switch method {
	case "CreateVolume":
		return metrics.Provision, true
	case "DeleteVolume":
		return metrics.Delete, true
	case "ControllerExpandVolume", "NodeExpandVolume":
		return metrics.Resize, true
	case "NodePublishVolume":
		return metrics.Publish, true
	case "NodeUnpublishVolume":
		return metrics.Unpublish, true
	case "NodeGetVolumeStats":
		return metrics.Stats, true
	case "CreateSnapshot":
		return metrics.Snapshot, true
	case "DeleteSnapshot":
		return metrics.SnapshotDelete, true
	}
	return "", false
}

// Listen opens a unix socket at path, replacing a stale socket left by an
// unclean stop (nobody can be serving on it: the node holds its tree lock).
//
// Only root may connect: the kubelet and operators. Connecting to a unix
// socket needs write permission on it, so the socket is 0600 and owned by
// the (root) process, and its directory is created 0750, root's, like the
// kubelet's own plugin directories: nobody else can replace the socket.
// The mode is the socket's from birth, not set after it appears: Linux
// gives a bound socket the mode of its inode filtered by the umask, so the
// descriptor is made 0600 before bind, and no umask (0 included) and no
// moment between bind and a chmod lets anyone else in.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listening on %s: a %v is in the way, not a stale socket", path, fi.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener works on a duplicate
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, fmt.Errorf("setting mode of socket %s: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// As with net.Listen: closing the listener removes the socket, so a
	// clean stop leaves nothing for the kubelet to find.
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	return l, nil
}

// ParseEndpoint accepts "unix://PATH" or "unix:PATH" or a bare absolute path.
func ParseEndpoint(ep string) (string, error) {
	p, ok := strings.CutPrefix(ep, "unix://")
	if !ok {
		p, ok = strings.CutPrefix(ep, "unix:")
	}
	if !ok && strings.Contains(ep, "://") {
		return "", fmt.Errorf("endpoint %q: only unix sockets are supported", ep)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path", ep)
	}
	return filepath.Clean(p), nil
}

// Run is the supervisor runnable of the plugin: it starts the server and
// serves Identity and Node on its endpoint (Config.Endpoint, by default the
// driver's socket in the kubelet's plugins directory) until ctx ends; with
// a ControllerEndpoint, Identity and Controller there as its child
// "controller"; with a Registrar, the kubelet's registration socket as its
// child "registration", started once the plugin's socket listens, so the
// kubelet never learns of a socket that does not answer yet. Each socket
// is removed when its server stops.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx, supervisor.Logger(ctx)); err != nil {
		return err
	}
	endpoint := s.cfg.Endpoint
	if endpoint == "" {
		endpoint = s.socket
	}
	l, err := Listen(endpoint)
	if err != nil {
		return err
	}
	s.log.Infof("CSI %s Identity and Node: serving on %s", names.DriverName, endpoint)
	children := map[string]supervisor.Runnable{}
	if s.cfg.ControllerEndpoint != "" {
		children["controller"] = s.serveController
	}
	if r := s.cfg.Registrar; r != nil {
		children["registration"] = r.Run
	}
	for name, run := range children {
		if err := supervisor.Run(ctx, name, run); err != nil {
			l.Close()
			return err
		}
	}
	return s.serve(ctx, l, endpoint, s.Register)
}

// serveController serves Identity and Controller on ControllerEndpoint.
func (s *Server) serveController(ctx context.Context) error {
	l, err := Listen(s.cfg.ControllerEndpoint)
	if err != nil {
		return err
	}
	s.log.Infof("CSI %s Identity and development Controller: serving on %s", names.DriverName, s.cfg.ControllerEndpoint)
	return s.serve(ctx, l, s.cfg.ControllerEndpoint, s.RegisterController)
}

// serve serves the services register adds on l, the socket at path, until
// ctx ends, and then removes the socket.
func (s *Server) serve(ctx context.Context, l net.Listener, path string, register func(*grpc.Server)) error {
	g := s.NewGRPCServer()
	register(g)
	err := supervisor.ServeGRPC(ctx, g, l)
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

func volumeKey(id string) string     { return "1-volume/" + id }
func targetKey(target string) string { return "2-target/" + target }
