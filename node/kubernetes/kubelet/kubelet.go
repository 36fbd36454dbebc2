// Package kubelet runs the Kubernetes side of a booted node: containerd,
// the images the node image ships, and the kubelet, in that order, as one
// subtree of plinth-node's supervision tree:
//
//	kubelet           this package's runnable: sequences its children
//	  containerd      Healthy once its socket accepts connections
//	  kubelet         started once containerd serves and the images are in
//
// The kubelet is started only after containerd serves and the images are
// imported, because a kubelet that finds no runtime, or no sandbox image,
// reports the node NotReady and backs off on its own; started in order it
// is Ready at its first status update. Once both run, each is restarted on
// its own when it fails: the kubelet reconnects to a restarted containerd,
// and containers outlive both (their shims are outside the process groups).
//
// The kubelet's root directory lives on the data partition (see RootDir):
// pod directories, emptyDir volumes and the kubelet's checkpoints need disk,
// not the RAM of an initramfs root, and Plinth's CSI target paths are below
// it. The data partition stays mounted nosuid,nodev (node/core/mount.go
// says why that is safe).
package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/core/nodeconfig"
	"source.plinth.dev/node/kubernetes/containerd"
	"source.plinth.dev/pkg/process"
	"source.plinth.dev/pkg/supervisor"
)

// healthzAddress is the kubelet's local health endpoint (its default).
const healthzAddress = "127.0.0.1:10248"

// readyTimeout bounds the kubelet's start; under emulation it takes a few
// seconds to serve.
const readyTimeout = 3 * time.Minute

// Config configures the node's kubelet.
type Config struct {
	// Binary is the kubelet executable (default "kubelet" on PATH).
	Binary string
	// RootDir is the kubelet's --root-dir, on the data partition. Static
	// pods are read from its manifests/ subdirectory.
	RootDir string
	// ConfigDir is where the node writes the kubelet's configuration and
	// credentials (on /run: they are rewritten on every start).
	ConfigDir string
	// PodLogsDir holds the containers' logs (on the data partition).
	PodLogsDir string
	// Node is the node's identity and network.
	Node nodeconfig.Node
	// Kubeconfig is the kubelet's kubeconfig; nil runs it standalone:
	// static pods only, no API server, anonymous and unrestricted access
	// to its port (which only the host can reach).
	Kubeconfig []byte
	// ContainerdSocket is the CRI endpoint.
	ContainerdSocket string
	// ServingCert and ServingKey are the kubelet's serving certificate
	// and key (PEM); nil makes the kubelet serve a self-signed one.
	ServingCert, ServingKey []byte

	// The settings below differ between a node and the host cluster of
	// test/launch, which renders its kubelet configuration here too.

	// Address is where the kubelet serves; the zero Addr means every
	// address, which a VM node needs (the host forwards the node IP's port
	// to eth0's address). A host cluster's kubelet serves on its node IP
	// only, beside whatever else the host runs.
	Address netip.Addr
	// NoHealthz turns the local health endpoint (127.0.0.1:10248, see
	// Healthz) off. A host cluster's kubelet shares the host's loopback
	// with other kubelets, whose port it must not take; test/launch waits
	// for the Node to be Ready instead. Node.Runnable needs the endpoint.
	NoHealthz bool
	// MaxPods is the kubelet's maxPods; zero keeps its default (110).
	// Benchmarks with hundreds of pods on one node raise it.
	MaxPods int
}

// ManifestsDir is where the kubelet reads static pods from.
func (c Config) ManifestsDir() string { return filepath.Join(c.RootDir, "manifests") }

func (c Config) configFile() string     { return filepath.Join(c.ConfigDir, "config.yaml") }
func (c Config) kubeconfigFile() string { return filepath.Join(c.ConfigDir, "kubeconfig") }
func (c Config) clientCAFile() string   { return filepath.Join(c.ConfigDir, "client-ca.crt") }
func (c Config) certFile() string       { return filepath.Join(c.ConfigDir, "serving.crt") }
func (c Config) keyFile() string        { return filepath.Join(c.ConfigDir, "serving.key") }

// The kubelet's configuration, the node's and test/launch's host
// cluster's (see the fields after ServingKey). The settings that differ
// from the kubelet's defaults:
//   - address 0.0.0.0 unless Address is set: the host forwards the node
//     IP's port into the guest to eth0's address, so the kubelet must
//     listen on both.
//   - tlsCertFile only if the configuration disk has one (an API server
//     that verifies kubelets needs it); otherwise the kubelet makes its own
//     self-signed serving certificate in its root.
//   - standalone (no kubeconfig): webhook authentication and authorization
//     need an API server, so access is anonymous and allowed; the port is
//     reachable only from the host.
//   - failCgroupV1: false keeps the kubelet running on a cgroup v1 host
//     (the node's kernel mounts v2; there it changes nothing).
//   - low eviction thresholds: a small data disk (or a busy developer
//     disk under a host cluster) must not evict the pods.
//   - nodeStatusUpdateFrequency: 1s gets the node Ready a few seconds
//     sooner; status is only written when it changes.
//   - volumeStatsAggPeriod: 5s instead of 1m: kubelet_volume_stats_* of a
//     new claim appear within seconds; plinth-node answers
//     NodeGetVolumeStats from the quota, so the shorter period costs next
//     to nothing.
var configTemplate = template.Must(template.New("kubelet").Parse(`# Written on every start; edits are lost.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.Address}}
port: {{.Node.KubeletPort}}
readOnlyPort: 0
{{- if .NoHealthz}}
healthzPort: 0
{{- else}}
healthzBindAddress: 127.0.0.1
healthzPort: 10248
{{- end}}
{{- if .Standalone}}
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
{{- else}}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: {{.ClientCAFile}}}
authorization: {mode: Webhook}
{{- end}}
{{- if .ServingCert}}
tlsCertFile: {{.CertFile}}
tlsPrivateKeyFile: {{.KeyFile}}
{{- end}}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{{.ContainerdSocket}}
imageServiceEndpoint: unix://{{.ContainerdSocket}}
staticPodPath: {{.Manifests}}
podLogsDir: {{.PodLogsDir}}
volumePluginDir: {{.RootDir}}/volume-plugins
resolvConf: /etc/resolv.conf
{{- if .Node.ClusterDNS.IsValid}}
clusterDNS: [{{.Node.ClusterDNS}}]
{{- end}}
{{- if .Node.ClusterDomain}}
clusterDomain: {{.Node.ClusterDomain}}
{{- end}}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
nodeStatusUpdateFrequency: 1s
volumeStatsAggPeriod: 5s
shutdownGracePeriod: 0s
{{- if .MaxPods}}
maxPods: {{.MaxPods}}
{{- end}}
`))

// WriteFiles writes the kubelet's configuration (and kubeconfig and the
// client CA taken from it, if any) and creates its directories. It returns
// the kubelet's arguments.
func (c Config) WriteFiles() ([]string, error) {
	for _, d := range []string{c.ConfigDir, c.RootDir, c.ManifestsDir(), c.PodLogsDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("writing kubelet configuration: %w", err)
		}
	}
	standalone := c.Kubeconfig == nil
	if !standalone {
		ca, err := clientCA(c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("writing kubelet configuration: %w", err)
		}
		if err := os.WriteFile(c.clientCAFile(), ca, 0o644); err != nil {
			return nil, fmt.Errorf("writing kubelet configuration: %w", err)
		}
		if err := os.WriteFile(c.kubeconfigFile(), c.Kubeconfig, 0o600); err != nil {
			return nil, fmt.Errorf("writing kubelet configuration: %w", err)
		}
	}
	if c.ServingCert != nil {
		if err := os.WriteFile(c.certFile(), c.ServingCert, 0o644); err != nil {
			return nil, fmt.Errorf("writing kubelet configuration: %w", err)
		}
		if err := os.WriteFile(c.keyFile(), c.ServingKey, 0o600); err != nil {
			return nil, fmt.Errorf("writing kubelet configuration: %w", err)
		}
	}
	address := "0.0.0.0"
	if c.Address.IsValid() {
		address = c.Address.String()
	}
	var b strings.Builder
	if err := configTemplate.Execute(&b, map[string]any{
		"Address":          address,
		"NoHealthz":        c.NoHealthz,
		"MaxPods":          c.MaxPods,
		"Node":             c.Node,
		"Standalone":       standalone,
		"ClientCAFile":     c.clientCAFile(),
		"ContainerdSocket": c.ContainerdSocket,
		"Manifests":        c.ManifestsDir(),
		"PodLogsDir":       c.PodLogsDir,
		"RootDir":          c.RootDir,
		"ServingCert":      c.ServingCert != nil,
		"CertFile":         c.certFile(),
		"KeyFile":          c.keyFile(),
	}); err != nil {
		return nil, fmt.Errorf("writing kubelet configuration: %w", err)
	}
	if err := os.WriteFile(c.configFile(), []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing kubelet configuration: %w", err)
	}
	args := []string{
		"--config=" + c.configFile(),
		"--root-dir=" + c.RootDir,
		"--hostname-override=" + c.Node.NodeName,
		"--node-ip=" + c.Node.NodeIP.String(),
	}
	if !standalone {
		args = append(args, "--kubeconfig="+c.kubeconfigFile())
	}
	return args, nil
}

// clientCA returns the cluster CA of a kubeconfig: the API server's
// client certificate for talking to kubelets is signed by it.
func clientCA(kubeconfig []byte) ([]byte, error) {
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parsing the kubelet's kubeconfig: %w", err)
	}
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("the kubelet's kubeconfig has no current context %q", kc.CurrentContext)
	}
	cl, ok := kc.Clusters[ctx.Cluster]
	if !ok || len(cl.CertificateAuthorityData) == 0 {
		return nil, fmt.Errorf("the kubelet's kubeconfig has no embedded CA (certificate-authority-data) for cluster %q", ctx.Cluster)
	}
	return cl.CertificateAuthorityData, nil
}

// Healthz is the kubelet's readiness: its local health endpoint answers
// "ok".
func Healthz(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+healthzAddress+"/healthz", nil)
	if err != nil {
		return err
	}
	client := http.Client{Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{}).DialContext}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kubelet healthz: %s", resp.Status)
	}
	return nil
}

// Node is the runnable of the node's Kubernetes side.
type Node struct {
	Containerd containerd.Config
	CNI        containerd.CNI
	Kubelet    Config
	// ImagesDir holds the image tarballs to import before the kubelet
	// starts (the node image's /usr/share/plinth/images).
	ImagesDir string
}

// keepImagesInterval is how often the node checks that the images it
// ships are still there (containerd.Config.KeepImages): a deleted sandbox
// image stops every pod start until it is back. One check is one
// `ctr images ls`.
const keepImagesInterval = 10 * time.Second

// Runnable starts containerd, waits until it serves, imports the images
// and keeps them present, starts the kubelet and signals Healthy once the kubelet is healthy.
func (n Node) Runnable() supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		if err := n.Containerd.WriteCNIConfig(n.CNI); err != nil {
			return err
		}
		if err := supervisor.Run(ctx, "containerd", n.Containerd.Runnable()); err != nil {
			return err
		}
		if err := poll(ctx, n.Containerd.Ready); err != nil {
			return fmt.Errorf("waiting for containerd: %w", err)
		}
		start := time.Now()
		imported, err := n.Containerd.ImportImages(ctx, log, n.ImagesDir)
		if err != nil {
			return err
		}
		log.Infof("imported %d images from %s in %s", len(imported), n.ImagesDir, time.Since(start).Round(time.Millisecond))
		if err := supervisor.Run(ctx, "images", n.Containerd.KeepImages(n.ImagesDir, keepImagesInterval)); err != nil {
			return err
		}
		args, err := n.Kubelet.WriteFiles()
		if err != nil {
			return err
		}
		kubelet := process.Runnable(process.Spec{
			Path:          orDefault(n.Kubelet.Binary, "kubelet"),
			Args:          args,
			Ready:         Healthz,
			ReadyInterval: 500 * time.Millisecond,
			ReadyTimeout:  readyTimeout,
		})
		if err := supervisor.Run(ctx, "kubelet", kubelet); err != nil {
			return err
		}
		if err := poll(ctx, Healthz); err != nil {
			return fmt.Errorf("waiting for the kubelet: %w", err)
		}
		mode := "standalone (static pods from " + n.Kubelet.ManifestsDir() + ")"
		if n.Kubelet.Kubeconfig != nil {
			mode = "registered with the API server"
		}
		log.Infof("kubelet running as node %s, %s", n.Kubelet.Node.NodeName, mode)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// poll calls check every 200ms until it succeeds or ctx ends. The
// children's own readiness timeouts bound how long that can take: a child
// that never gets ready is restarted, and this waits on.
func poll(ctx context.Context, check func(context.Context) error) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
