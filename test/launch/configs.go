package launch

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"source.plinth.dev/node/kubernetes/containerd"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch/host"
)

// The configuration files of the components, written into the work
// directory. Each setting that differs from upstream defaults says why.

var containerdConfig = template.Must(template.New("containerd").Parse(`version = 2
root = "{{.Root}}"
state = "{{.State}}"
# Plugins that would write outside the work directory (opt: /opt/containerd)
# or that a node never uses.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.internal.v1.tracing",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{{.Socket}}"

[ttrpc]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Hosts that drop CAP_SYS_RESOURCE (like some sandboxes) cannot lower
  # oom_score_adj below the runtime's own; clamp instead of failing every
  # pod sandbox with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # Test pods need no AppArmor profile, and loading containerd's default one
  # needs apparmor_parser, which a minimal host may lack.
  disable_apparmor = true
  # A block volume's device node in a container belongs to the pod's
  # runAsUser/runAsGroup, as on a node: without this it is root's (0660),
  # and a pod running as a non-root user cannot open its own block claim.
  device_ownership_from_security_context = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # kubelet uses the cgroupfs driver; both must agree.
        SystemdCgroup = false
{{- if .RunscConfig}}
    # gVisor (see gvisor.go). containerd finds containerd-shim-runsc-v1 on
    # its PATH; the options hand the shim its configuration file.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{{.RunscHandler}}]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{{.RunscHandler}}.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "{{.RunscConfig}}"
{{- end}}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.CNIConf}}"
`))

// The kubelet's configuration. Notes on the less obvious settings:
//   - failCgroupV1: false keeps the kubelet running on cgroup v1 hosts.
//   - podLogsDir and volumePluginDir keep pod logs and the flexvolume
//     directory inside the work directory instead of /var/log/pods and
//     /usr/libexec/kubernetes.
//   - low eviction thresholds: a busy developer disk must not evict the
//     test pods.
//   - nodeStatusUpdateFrequency: 1s gets the node Ready a few seconds
//     sooner; status is only written when it changes.
//   - volumeStatsAggPeriod: 5s instead of 1m: kubelet_volume_stats_* of a
//     new PVC appear within seconds (tests and users of make run look for
//     them); plinth-node answers NodeGetVolumeStats from the quota, so the
//     shorter period costs next to nothing.
var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.NodeIP}}
port: {{.Port}}
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: {{.CAFile}}}
authorization: {mode: Webhook}
tlsCertFile: {{.CertFile}}
tlsPrivateKeyFile: {{.KeyFile}}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{{.Containerd}}
imageServiceEndpoint: unix://{{.Containerd}}
podLogsDir: {{.PodLogs}}
volumePluginDir: {{.VolumePlugins}}
resolvConf: /etc/resolv.conf
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
`))

// writeTemplate renders t with data into path.
func writeTemplate(path string, t *template.Template, data any) error {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return fmt.Errorf("rendering %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// writeConfigs writes every component's configuration file.
func (c *Cluster) writeConfigs() error {
	if err := writeTemplate(c.containerdConfigPath(), containerdConfig, map[string]string{
		"Root":         filepath.Join(c.DataDir, "containerd"),
		"State":        filepath.Join(c.Dir, "run", "containerd"),
		"Socket":       c.ContainerdSocket,
		"SandboxImage": images.PauseRef,
		"CNIBin":       c.cniBinDir,
		"CNIConf":      filepath.Join(c.Dir, "cni", "net.d"),
		"RunscHandler": GVisorHandler,
		"RunscConfig":  c.runscConfigPath(),
	}); err != nil {
		return err
	}
	if err := c.writeRunscConfig(); err != nil {
		return err
	}
	// The pod network is a Plinth node's, written by the node's own code.
	cd := containerd.Config{CNIConfDir: filepath.Join(c.Dir, "cni", "net.d")}
	if err := cd.WriteCNIConfig(containerd.CNI{
		Bridge:  host.BridgeName,
		IPAMDir: filepath.Join(c.Dir, "cni", "ipam"),
		PodCIDR: podCIDR,
	}); err != nil {
		return err
	}
	kubeletServing := c.pki.Get("kubelet-serving")
	if err := writeTemplate(filepath.Join(c.Dir, "kubelet.yaml"), kubeletConfig, map[string]any{
		"NodeIP":        c.NodeIP,
		"Port":          c.kubeletPort,
		"CAFile":        c.pki.CA.CertPath,
		"CertFile":      kubeletServing.CertPath,
		"KeyFile":       kubeletServing.KeyPath,
		"Containerd":    c.ContainerdSocket,
		"PodLogs":       filepath.Join(c.DataDir, "pod-logs"),
		"VolumePlugins": filepath.Join(c.DataDir, "kubelet-volume-plugins"),
	}); err != nil {
		return err
	}
	for _, kc := range []struct{ file, cert string }{
		{c.Kubeconfig, "admin"},
		{c.kubeconfigPath("controller-manager"), "controller-manager"},
		{c.kubeconfigPath("scheduler"), "scheduler"},
		{c.kubeconfigPath("kubelet"), "kubelet"},
		{c.NodeKubeconfig, "plinth-node"},
	} {
		if err := c.writeKubeconfig(kc.file, kc.cert); err != nil {
			return err
		}
	}
	return nil
}

var kubeconfigTemplate = template.Must(template.New("kubeconfig").Parse(`apiVersion: v1
kind: Config
clusters:
- name: plinth
  cluster:
    server: {{.Server}}
    certificate-authority-data: {{.CA}}
users:
- name: {{.User}}
  user:
    client-certificate-data: {{.Cert}}
    client-key-data: {{.Key}}
contexts:
- name: plinth
  context:
    cluster: plinth
    user: {{.User}}
current-context: plinth
`))

// writeKubeconfig writes a self-contained kubeconfig (certificates inline,
// so it keeps working when copied) for the identity named cert.
func (c *Cluster) writeKubeconfig(path, cert string) error {
	b, err := c.kubeconfig(c.APIServerURL, cert)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig for %s: %w", cert, err)
	}
	return nil
}

// kubeconfig renders a self-contained kubeconfig for the identity named
// cert, reaching the apiserver at server.
func (c *Cluster) kubeconfig(server, cert string) ([]byte, error) {
	kp := c.pki.Get(cert)
	key, err := kp.KeyPEM()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for %s: %w", cert, err)
	}
	b64 := base64.StdEncoding.EncodeToString
	var b strings.Builder
	if err := kubeconfigTemplate.Execute(&b, map[string]string{
		"Server": server,
		"CA":     b64(c.pki.CA.CertPEM()),
		"User":   cert,
		"Cert":   b64(kp.CertPEM()),
		"Key":    b64(key),
	}); err != nil {
		return nil, fmt.Errorf("kubeconfig for %s: %w", cert, err)
	}
	return []byte(b.String()), nil
}

func (c *Cluster) kubeconfigPath(name string) string {
	return filepath.Join(c.Dir, "kubeconfigs", name+".kubeconfig")
}

func (c *Cluster) containerdConfigPath() string {
	return filepath.Join(c.Dir, "containerd.toml")
}
