package csi

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
)

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
