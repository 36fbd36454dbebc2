package launch

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"source.plinth.dev/node/core/nodeconfig"
	"source.plinth.dev/node/kubernetes/containerd"
	"source.plinth.dev/node/kubernetes/kubelet"
	"source.plinth.dev/test/launch/host"
)

// The configuration files of the components, written into the work
// directory. Each setting that differs from upstream defaults says why.
// containerd's and the kubelet's are a node's, rendered by the node's own
// packages (containerdConfig, kubeletConfig) with what a host needs
// differently.

// writeConfigs writes the configuration files of the control plane and,
// with a node, its pod network. containerd's and the kubelet's are written
// when they start (startContainerd, startKubelet): their directories are on
// the data filesystem, which is mounted only then.
func (c *Cluster) writeConfigs(node bool) error {
	if node {
		// The pod network is a Plinth node's, written by the node's own code.
		if err := c.containerdConfig().WriteCNIConfig(containerd.CNI{
			Bridge:  host.BridgeName,
			IPAMDir: filepath.Join(c.Dir, "cni", "ipam"),
			PodCIDR: podCIDR,
		}); err != nil {
			return err
		}
	}
	for _, kc := range []struct{ file, cert string }{
		{c.Kubeconfig, "admin"},
		{c.kubeconfigPath("controller-manager"), "controller-manager"},
		{c.kubeconfigPath("scheduler"), "scheduler"},
		{c.kubeconfigPath("snapshot-controller"), "snapshot-controller"},
		{c.NodeKubeconfig, "plinth-node"},
		{c.kubeconfigPath("plinth-admission"), "plinth-admission"},
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

// containerdConfig is the host node's containerd: a node's configuration
// with its files in the work directory, pivot_root (the host has a real
// root), a clamped oom_score_adj and, with gVisor, the runsc runtime.
// With plinth-node, runc runs through its wrapper, as on a node.
func (c *Cluster) containerdConfig() containerd.Config {
	var guard string
	if c.cfg.PlinthNode != nil {
		guard, _ = filepath.Abs(c.cfg.PlinthNode.Binary)
	}
	cfg := containerd.Config{
		RuncGuard:           guard,
		ConfigFile:          c.containerdConfigPath(),
		Root:                filepath.Join(c.DataDir, "containerd"),
		State:               filepath.Join(c.Dir, "run", "containerd"),
		Socket:              c.ContainerdSocket,
		CNIBinDir:           c.cniBinDir,
		CNIConfDir:          filepath.Join(c.Dir, "cni", "net.d"),
		Runsc:               c.runsc(),
		RestrictOOMScoreAdj: true,
	}
	return cfg
}

// kubeletConfig is the host node's kubelet: a node's configuration serving
// on the node IP with the cluster's certificates, without the local health
// endpoint (the host may run other kubelets) or cluster DNS, its pod logs
// on the data filesystem.
func (c *Cluster) kubeletConfig() (kubelet.Config, error) {
	ip, err := netip.ParseAddr(c.NodeIP)
	if err != nil {
		return kubelet.Config{}, fmt.Errorf("kubelet configuration: node IP: %w", err)
	}
	kc, err := c.kubeconfig(c.APIServerURL, "kubelet")
	if err != nil {
		return kubelet.Config{}, err
	}
	serving := c.pki.Get("kubelet-serving")
	key, err := serving.KeyPEM()
	if err != nil {
		return kubelet.Config{}, fmt.Errorf("kubelet configuration: %w", err)
	}
	return kubelet.Config{
		RootDir:          c.KubeletRootDir,
		ConfigDir:        filepath.Join(c.Dir, "kubelet"),
		PodLogsDir:       filepath.Join(c.DataDir, "pod-logs"),
		Node:             nodeconfig.Node{NodeName: c.NodeName, NodeIP: ip, KubeletPort: c.kubeletPort},
		Kubeconfig:       kc,
		ContainerdSocket: c.ContainerdSocket,
		ServingCert:      serving.CertPEM(),
		ServingKey:       key,
		Address:          ip,
		NoHealthz:        true,
		MaxPods:          c.cfg.MaxPods,
	}, nil
}
