package csi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/supervisor"
)

func TestControllerLifecycle(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	c := &controller{s: e.srv}
	long := strings.Repeat("Sanity-Name-", 10) // 120 characters, upper case
	req := func(name string, mode volume.Mode, size int64) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{
			Name:               name,
			VolumeCapabilities: []*csi.VolumeCapability{capability(mode, rwo)},
			CapacityRange:      &csi.CapacityRange{RequiredBytes: size},
		}
	}
	v1, err := c.CreateVolume(ctx, req(long, volume.Filesystem, 3*MiB+1))
	if err != nil {
		t.Fatal(err)
	}
	if id := v1.Volume.VolumeId; volume.ValidateID(id) != nil || id != VolumeIDForName(long) || v1.Volume.CapacityBytes != 3*MiB+volume.Alignment {
		t.Errorf("CreateVolume = %+v", v1.Volume)
	}
	if topo := v1.Volume.GetAccessibleTopology(); len(topo) != 1 || topo[0].Segments[names.TopologyKeyHostname] != "node-a" {
		t.Errorf("topology %v", topo)
	}
	v2, err := c.CreateVolume(ctx, req(long, volume.Filesystem, 3*MiB+1))
	if err != nil || v2.Volume.VolumeId != v1.Volume.VolumeId {
		t.Errorf("repeated CreateVolume = %+v, %v", v2, err)
	}
	_, err = c.CreateVolume(ctx, req(long, volume.Filesystem, 8*MiB))
	wantCode(t, "CreateVolume with another size", err, codes.AlreadyExists)
	_, err = c.CreateVolume(ctx, req(long, volume.Block, 3*MiB+1))
	wantCode(t, "CreateVolume with another mode", err, codes.AlreadyExists)
	if id := VolumeIDForName("pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10"); id != "pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10" {
		t.Errorf("a valid name is not used as the ID: %s", id)
	}

	bad := []struct {
		name string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", req("", volume.Block, MiB), codes.InvalidArgument},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "x"}, codes.InvalidArgument},
		{"mixed capabilities", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo), capability(volume.Filesystem, rwo)}}, codes.InvalidArgument},
		{"multi-node", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}}, codes.InvalidArgument},
		{"negative size", req("x", volume.Block, -1), codes.InvalidArgument},
		{"limit below rounding", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1000, LimitBytes: 1000}}, codes.OutOfRange},
		{"huge", req("x", volume.Block, 1<<62), codes.OutOfRange},
		{"unknown parameter", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}, Parameters: map[string]string{"fsType": "ext4"}}, codes.InvalidArgument},
		{"clone", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}, VolumeContentSource: &csi.VolumeContentSource{}}, codes.InvalidArgument},
		{"other node", &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{names.TopologyKeyHostname: "node-b"}}}}}, codes.ResourceExhausted},
		{"larger than the disk", req("x", volume.Block, 1<<50), codes.ResourceExhausted},
	}
	for _, b := range bad {
		_, err := c.CreateVolume(ctx, b.req)
		wantCode(t, "CreateVolume "+b.name, err, b.want)
	}
	if _, err := e.volumes.Stat(ctx, VolumeIDForName("x")); err == nil {
		t.Errorf("a refused CreateVolume left volume x")
	}

	id := v1.Volume.VolumeId
	vr, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Filesystem, rwo)}})
	if err != nil || vr.Confirmed == nil {
		t.Errorf("ValidateVolumeCapabilities(mount) = %v, %v", vr, err)
	}
	vr, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}})
	if err != nil || vr.Confirmed != nil || vr.Message == "" {
		t.Errorf("ValidateVolumeCapabilities(block) of a filesystem volume = %v, %v", vr, err)
	}
	_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "missing", VolumeCapabilities: []*csi.VolumeCapability{capability(volume.Block, rwo)}})
	wantCode(t, "ValidateVolumeCapabilities of a missing volume", err, codes.NotFound)

	// A published volume is not deleted under its user.
	if err := e.publish(id, e.target("p"), volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, "DeleteVolume of a published volume", err, codes.FailedPrecondition)
	if err := e.unpublish(id, e.target("p")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume: %v", err)
		}
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "../x"})
	wantCode(t, "DeleteVolume with a malformed ID", err, codes.InvalidArgument)
}

// TestRegistration plays the kubelet's part of plugin registration: it
// reads the plugin info, rejects the registration, and expects the socket
// to be torn down and re-created (the kubelet only retries on a new
// socket). A stale socket from an unclean stop is replaced at start.
func TestRegistration(t *testing.T) {
	e := newEnv(t, "")
	sock, err := e.root.Kubelet.PluginsRegistry.Registration(names.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	// A stale socket: bound, never unlinked, nobody listening.
	if err := os.MkdirAll(filepath.Dir(sock.FullPath()), 0o750); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock.FullPath()}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)

	r := &Registrar{Kubelet: &e.root.Kubelet, Backoff: 200 * time.Millisecond}
	cancel, _ := supervisor.TestHarness(t, r.Run)
	defer cancel()

	inode := func() uint64 {
		var st unix.Stat_t
		if unix.Stat(sock.FullPath(), &st) != nil {
			return 0
		}
		return st.Ino
	}
	connect := func() registerapi.RegistrationClient {
		t.Helper()
		var conn *grpc.ClientConn
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := grpc.NewClient("unix://"+sock.FullPath(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "unix", sock.FullPath())
				}))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err = registerapi.NewRegistrationClient(c).GetInfo(ctx, &registerapi.InfoRequest{})
				cancel()
				if err == nil {
					conn = c
					break
				}
				c.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("registration socket never answered: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Cleanup(func() { conn.Close() })
		return registerapi.NewRegistrationClient(conn)
	}
	client := connect()
	info, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	plugin, _ := e.root.Kubelet.Plugins.Driver(names.DriverName)
	if info.Type != registerapi.CSIPlugin || info.Name != names.DriverName || info.Endpoint != plugin.CSISocket.FullPath() || len(info.SupportedVersions) == 0 {
		t.Errorf("GetInfo = %+v", info)
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "test rejects"}); err != nil {
		t.Fatal(err)
	}
	// The socket must disappear (for the backoff) and come back: only a
	// new socket makes the kubelet's watcher try again. (Inode numbers
	// are no proof of newness: the filesystem reuses them.)
	deadline := time.Now().Add(5 * time.Second)
	sawGone := false
	for {
		ino := inode()
		if ino == 0 {
			sawGone = true
		}
		if sawGone && ino != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket not torn down and re-created after a failed registration (gone seen: %v)", sawGone)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := connect().GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Errorf("new registration socket: %v", err)
	}
	cancel()
}

// TestRunServesPluginAndRegistration runs the node plugin the way
// plinth-node does (a supervised runnable with registration) and follows
// the kubelet's path: the registration socket names the CSI socket, which
// answers.
func TestRunServesPluginAndRegistration(t *testing.T) {
	e := newEnv(t, "")
	srv := &Server{Volumes: e.volumes, Kubelet: &e.root.Kubelet, State: &e.root.Ephemeral.CSI, NodeName: "node-a", Registration: true}
	cancel, _ := supervisor.TestHarness(t, srv.Run)
	defer cancel()
	sock, _ := e.root.Kubelet.PluginsRegistry.Registration(names.DriverName)
	dial := func(p string) *grpc.ClientConn {
		c, err := grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var info *registerapi.PluginInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, c := context.WithTimeout(context.Background(), time.Second)
		var err error
		info, err = registerapi.NewRegistrationClient(dial(sock.FullPath())).GetInfo(ctx, &registerapi.InfoRequest{})
		c()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registration socket never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := csi.NewIdentityClient(dial(info.Endpoint)).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || resp.Name != names.DriverName {
		t.Fatalf("GetPluginInfo on the registered endpoint %s = %v, %v", info.Endpoint, resp, err)
	}
	probe, err := csi.NewIdentityClient(dial(info.Endpoint)).Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Errorf("Probe = %v, %v", probe, err)
	}
	cancel()
}
