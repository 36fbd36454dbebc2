package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/test/ktest"
)

// csiServeWithMetrics starts csi-serve with a metrics endpoint on a free
// port and returns the process, its clients, the kubelet directory and
// the endpoint's base URL.
func csiServeWithMetrics(t *testing.T) (*node, csi.NodeClient, csi.ControllerClient, string, string) {
	t.Helper()
	dir := t.TempDir()
	data, kubelet, eph := filepath.Join(dir, "data"), filepath.Join(dir, "kubelet"), filepath.Join(dir, "eph")
	if err := os.MkdirAll(filepath.Join(kubelet, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	nodeSock, ctrlSock := filepath.Join(dir, "csi.sock"), filepath.Join(dir, "ctrl.sock")
	n := startNode(t, "csi-serve", "--endpoint", "unix://"+nodeSock, "--controller-endpoint", "unix://"+ctrlSock,
		"--data-dir", data, "--kubelet-dir", kubelet, "--ephemeral-dir", eph, "--node-name", "n1",
		"--allow-unenforced-capacity", "--metrics-address", "127.0.0.1:0")
	n.waitLine(t, "serving on "+ctrlSock)
	n.waitLine(t, "serving on "+nodeSock)
	n.waitLine(t, "serving metrics and health on http://")
	m := regexp.MustCompile(`serving metrics and health on (http://[0-9.:]+)`).FindStringSubmatch(n.output())
	if m == nil {
		t.Fatalf("no endpoint address in the log:\n%s", n.output())
	}
	dial := func(p string) *grpc.ClientConn {
		c, err := grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(unix.SIGTERM)
		if err := n.wait(t); err != nil {
			t.Errorf("csi-serve exited with %v after SIGTERM:\n%s", err, n.output())
		}
	})
	return n, csi.NewNodeClient(dial(nodeSock)), csi.NewControllerClient(dial(ctrlSock)), kubelet, m[1]
}

// get returns the status code and body of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var mountCap = &csi.VolumeCapability{
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
}

// TestCSIServeMetrics drives csi-serve through known numbers of calls and
// checks that a scrape of its endpoint counts exactly those: creates,
// publishes, stats, unpublishes, deletes, one publish that fails with
// NotFound, and the volumes on the data filesystem. It also checks that
// /healthz and /readyz answer 200 on a running plugin.
func TestCSIServeMetrics(t *testing.T) {
	ktest.RequireRoot(t)
	n, nc, cc, kubelet, url := csiServeWithMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Readiness comes once every runnable has signalled Healthy; the
	// sockets are served just before that.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, url+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s\n%s", code, body, n.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get(t, url+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}

	const vols, publishes = 2, 3 // each volume published at 3 targets
	var targets []struct{ id, path string }
	for i := range vols {
		resp, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("vol-%d", i),
			VolumeCapabilities: []*csi.VolumeCapability{mountCap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		for j := range publishes {
			p := filepath.Join(kubelet, "pods", fmt.Sprintf("v%d-t%d", i, j))
			if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: resp.Volume.VolumeId, TargetPath: p, VolumeCapability: mountCap}); err != nil {
				t.Fatal(err)
			}
			targets = append(targets, struct{ id, path string }{resp.Volume.VolumeId, p})
		}
	}
	_, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "no-such-volume",
		TargetPath: filepath.Join(kubelet, "pods", "none"), VolumeCapability: mountCap})
	if err == nil {
		t.Fatal("publishing a volume that does not exist succeeded")
	}
	for _, tg := range targets {
		if _, err := nc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: tg.id, VolumePath: tg.path}); err != nil {
			t.Fatal(err)
		}
	}

	s, err := metricstest.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"plinth_operation_duration_seconds", []string{"operation", "provision"}, vols},
		{"plinth_operation_duration_seconds", []string{"operation", "publish"}, vols*publishes + 1},
		{"plinth_operation_errors_total", []string{"operation", "publish", "code", "NotFound"}, 1},
		{"plinth_operation_errors_total", []string{"operation", "publish"}, 1},
		{"plinth_operation_duration_seconds", []string{"operation", "stats"}, vols * publishes},
		{"plinth_operation_duration_seconds", []string{"operation", "unpublish"}, 0},
		{"plinth_volumes", []string{"mode", "filesystem"}, vols},
		{"plinth_volumes", []string{"mode", "block"}, 0},
		{"plinth_volumes_allocated_bytes", []string{"mode", "filesystem"}, vols * 8 << 20},
		{"plinth_supervisor_restarts_total", nil, 0},
	} {
		if got := s.Families.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := s.Families.Value("plinth_data_filesystem_size_bytes"); got <= 0 {
		t.Errorf("plinth_data_filesystem_size_bytes = %v, want > 0", got)
	}

	for _, tg := range targets {
		if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tg.id, TargetPath: tg.path}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < len(targets); i += publishes {
		if _, err := cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: targets[i].id}); err != nil {
			t.Fatal(err)
		}
	}
	s, err = metricstest.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op   string
		want float64
	}{{"unpublish", vols * publishes}, {"delete", vols}} {
		if got := s.Families.Value("plinth_operation_duration_seconds", "operation", c.op); got != c.want {
			t.Errorf("%s operations = %v, want %v", c.op, got, c.want)
		}
	}
	if got := s.Families.Value("plinth_volumes"); got != 0 {
		t.Errorf("plinth_volumes = %v after deleting every volume, want 0", got)
	}
}

// TestScrapeCost measures one scrape of csi-serve's endpoint with 100
// volumes on the node (50 filesystem, 50 block): its time and size, for
// the notes. It checks only that the scrape sees all of them.
func TestScrapeCost(t *testing.T) {
	ktest.RequireRoot(t)
	_, _, cc, _, url := csiServeWithMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	blockCap := &csi.VolumeCapability{AccessMode: mountCap.AccessMode,
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	const vols = 100
	for i := range vols {
		c := mountCap
		if i%2 == 1 {
			c = blockCap
		}
		if _, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("vol-%d", i),
			VolumeCapabilities: []*csi.VolumeCapability{c}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := metricstest.Get(url + "/metrics"); err != nil { // warm up
		t.Fatal(err)
	}
	const scrapes = 20
	var total time.Duration
	var s *metricstest.Scrape
	for range scrapes {
		var err error
		if s, err = metricstest.Get(url + "/metrics"); err != nil {
			t.Fatal(err)
		}
		total += s.Took
	}
	if got := s.Families.Value("plinth_volumes"); got != vols {
		t.Errorf("plinth_volumes = %v, want %d", got, vols)
	}
	t.Logf("one scrape with %d volumes: %v on average over %d, %d bytes, %d families",
		vols, (total / scrapes).Round(time.Microsecond), scrapes, s.Bytes, len(s.Families))
}

// TestNodeHealthAndRestarts runs the node tree with a Kubernetes service
// that cannot start (its kubeconfig does not exist) and checks what the
// endpoint says: alive (/healthz 200), not ready (/readyz 503 naming the
// service), and the service's restarts counted.
func TestNodeHealthAndRestarts(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, "--root", filepath.Join(dir, "node"), "--node-name", "health-1",
		"--kubeconfig", filepath.Join(dir, "missing.kubeconfig"), "--allow-unenforced-capacity",
		"--metrics-address", "127.0.0.1:0")
	n.waitLine(t, "serving metrics and health on http://")
	m := regexp.MustCompile(`serving metrics and health on (http://[0-9.:]+)`).FindStringSubmatch(n.output())
	if m == nil {
		t.Fatalf("no endpoint address in the log:\n%s", n.output())
	}
	url := m[1]
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(unix.SIGTERM)
		if err := n.wait(t); err != nil {
			t.Errorf("plinth-node exited with %v after SIGTERM:\n%s", err, n.output())
		}
	})
	const dn = "root.kubernetes"
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := metricstest.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if s.Families.Value("plinth_supervisor_restarts_total", "runnable", dn) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two restarts of %s counted within 20s:\n%s", dn, n.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := get(t, url+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s, want 200 (the tree runs; only a service is in backoff)", code, body)
	}
	code, body := get(t, url+"/readyz")
	if code != http.StatusServiceUnavailable || !regexp.MustCompile(regexp.QuoteMeta(dn)+` \((backoff|starting)`).MatchString(body) {
		t.Errorf("/readyz: %d %q, want 503 naming %s", code, body, dn)
	}
}
