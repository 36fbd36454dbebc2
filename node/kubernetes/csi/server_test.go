package csi

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
)

// TestRunServesPluginAndRegistration runs the node plugin the way
// plinth-node does (a supervised runnable with registration) and follows
// the kubelet's path: the registration socket names the CSI socket, which
// answers.
func TestRunServesPluginAndRegistration(t *testing.T) {
	e := newEnv(t, "")
	cancel := e.runWithRegistration(t)
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

// runWithRegistration runs the plugin with kubelet registration under a
// supervisor, as plinth-node does, until cancel is called or the test ends.
func (e *env) runWithRegistration(t *testing.T) (cancel func()) {
	t.Helper()
	r, err := NewRegistrar(&e.root.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{Volumes: e.volumes, Kubelet: &e.root.Kubelet, State: &e.root.Ephemeral.CSI, NodeName: "node-a", Registrar: r})
	if err != nil {
		t.Fatal(err)
	}
	cancel, _ = supervisor.TestHarness(t, srv.Run)
	return cancel
}

// TestSocketsOnlyRoot: the CSI socket and the kubelet registration socket
// are reachable by root only, from the moment they exist: each is a socket
// of mode 0600 owned by root (connecting needs write permission), in a
// root-owned directory nobody else may write to (so nobody can put another
// socket in its place). The plugin runs with umask 0 here, so a mode set
// after bind, or one left to the umask, would show as 0777. Both sockets
// are gone after a clean stop.
func TestSocketsOnlyRoot(t *testing.T) {
	e := newEnv(t, "")
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	cancel := e.runWithRegistration(t)
	defer cancel()
	reg, _ := e.root.Kubelet.PluginsRegistry.Registration(names.DriverName)
	plugin, _ := e.root.Kubelet.Plugins.Driver(names.DriverName)
	socks := []string{plugin.CSISocket.FullPath(), reg.FullPath()}
	// The registration socket is made once the CSI socket listens.
	waitFor(t, "both sockets", func() bool { return exists(socks[0]) && exists(socks[1]) })
	for _, p := range socks {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Mode&0o7777 != 0o600 || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: mode %#o (type %#o), owner %d:%d; want a socket of mode 0600 owned by 0:0", p, st.Mode&0o7777, st.Mode&syscall.S_IFMT, st.Uid, st.Gid)
		}
		dir := filepath.Dir(p)
		if err := syscall.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Mode&0o022 != 0 {
			t.Errorf("directory %s: mode %#o, owner %d; want root's, writable by root only", dir, st.Mode&0o7777, st.Uid)
		}
	}
	cancel()
	for _, p := range socks {
		if exists(p) {
			t.Errorf("%s is still there after the plugin stopped", p)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWiringMistakesFailAtConstruction: a Server or Registrar missing a
// dependency is refused when it is built (not when it runs, where the
// supervisor would only restart it), and so is a Start without a logger.
func TestWiringMistakesFailAtConstruction(t *testing.T) {
	dir, err := os.MkdirTemp("", "csi") // short: socket paths have a limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var root localstorage.Root
	if err := root.Place(dir); err != nil {
		t.Fatal(err)
	}
	vols := &volume.Manager{}
	good := Config{Volumes: vols, Kubelet: &root.Kubelet, State: &root.Ephemeral.CSI, NodeName: "node-a"}
	for _, c := range []struct {
		name  string
		spoil func(*Config)
	}{
		{"no volumes", func(c *Config) { c.Volumes = nil }},
		{"no kubelet directory", func(c *Config) { c.Kubelet = nil }},
		{"unplaced kubelet directory", func(c *Config) { c.Kubelet = &localstorage.KubeletDirectory{} }},
		{"no state directory", func(c *Config) { c.State = nil }},
		{"unplaced state directory", func(c *Config) { c.State = &localstorage.CSIStateDirectory{} }},
		{"no node name", func(c *Config) { c.NodeName = "" }},
	} {
		cfg := good
		c.spoil(&cfg)
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer with %s: no error", c.name)
		}
	}
	srv, err := NewServer(good)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	if err := srv.Start(context.Background(), nil); err == nil {
		t.Error("Start without a logger: no error")
	}
	for name, k := range map[string]*localstorage.KubeletDirectory{"no": nil, "an unplaced": {}} {
		if _, err := NewRegistrar(k); err == nil {
			t.Errorf("NewRegistrar with %s kubelet directory: no error", name)
		}
	}
	if _, err := NewRegistrar(&root.Kubelet); err != nil {
		t.Errorf("NewRegistrar: %v", err)
	}
}
