package kubelet

import (
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"source.plinth.dev/node/core/nodeconfig"
)

func testConfig(t *testing.T, kubeconfig []byte) Config {
	dir := t.TempDir()
	n := nodeconfig.Node{
		NodeName: "plinth-vm", Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"),
		NodeIP: netip.MustParseAddr("10.0.77.2"), PodCIDR: netip.MustParsePrefix("10.244.0.0/24"),
		ClusterDNS: netip.MustParseAddr("10.96.0.10"),
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	return Config{
		RootDir: filepath.Join(dir, "data/kubelet"), ConfigDir: filepath.Join(dir, "run/kubelet"),
		PodLogsDir: filepath.Join(dir, "data/pod-logs"), Node: n, Kubeconfig: kubeconfig,
		ContainerdSocket: "/run/containerd/containerd.sock",
	}
}

func TestStandaloneConfig(t *testing.T) {
	c := testConfig(t, nil)
	args, err := c.WriteFiles()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--kubeconfig") }) {
		t.Errorf("standalone kubelet gets a kubeconfig: %q", args)
	}
	for _, want := range []string{"--node-ip=10.0.77.2", "--hostname-override=plinth-vm", "--root-dir=" + c.RootDir} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	cfg, _ := os.ReadFile(c.configFile())
	if strings.Contains(string(cfg), "tlsCertFile") {
		t.Errorf("a serving certificate configured without one given:\n%s", cfg)
	}
	if strings.Contains(string(cfg), "maxPods") {
		t.Errorf("maxPods configured without MaxPods (the kubelet's default is wanted):\n%s", cfg)
	}
	for _, want := range []string{"port: 10250", "mode: AlwaysAllow", "anonymous: {enabled: true}", "clusterDNS: [10.96.0.10]",
		"clusterDomain: cluster.local", "cgroupDriver: cgroupfs", "staticPodPath: " + c.ManifestsDir(), "unix:///run/containerd/containerd.sock",
		"address: 0.0.0.0", "healthzPort: 10248"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if st, err := os.Stat(c.ManifestsDir()); err != nil || !st.IsDir() {
		t.Errorf("manifests directory not created: %v", err)
	}
}

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func kubeconfig(ca string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: plinth
  cluster: {server: "https://10.0.2.2:6443", certificate-authority-data: ` + base64.StdEncoding.EncodeToString([]byte(ca)) + `}
users:
- name: node
  user: {token: x}
contexts:
- name: plinth
  context: {cluster: plinth, user: node}
current-context: plinth
`)
}

func TestClusterConfig(t *testing.T) {
	c := testConfig(t, kubeconfig(testCA))
	c.ServingCert, c.ServingKey = []byte("cert"), []byte("key")
	args, err := c.WriteFiles()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--kubeconfig="+c.kubeconfigFile()) {
		t.Errorf("args %q lack the kubeconfig", args)
	}
	ca, err := os.ReadFile(c.clientCAFile())
	if err != nil || string(ca) != testCA {
		t.Errorf("client CA = %q, %v; want the kubeconfig's CA", ca, err)
	}
	if st, err := os.Stat(c.kubeconfigFile()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig not written private: %v %v", st, err)
	}
	cfg, _ := os.ReadFile(c.configFile())
	for _, want := range []string{"mode: Webhook", "webhook: {enabled: true}", "clientCAFile: " + c.clientCAFile(), "tlsCertFile: " + c.certFile(), "tlsPrivateKeyFile: " + c.keyFile()} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}

func TestKubeconfigWithoutCA(t *testing.T) {
	kc := strings.Replace(string(kubeconfig(testCA)), "certificate-authority-data", "insecure-skip-tls-verify: true, x", 1)
	_, err := testConfig(t, []byte(kc)).WriteFiles()
	if err == nil || !strings.Contains(err.Error(), "no embedded CA") {
		t.Fatalf("err = %v, want one about the missing CA", err)
	}
}

// TestHostClusterConfig: test/launch's host cluster renders its kubelet
// configuration here too, serving on its node IP, without the local health
// endpoint, and without cluster DNS.
func TestHostClusterConfig(t *testing.T) {
	c := testConfig(t, kubeconfig(testCA))
	c.Node.ClusterDNS, c.Node.ClusterDomain = netip.Addr{}, ""
	c.Address = netip.MustParseAddr("10.1.2.3")
	c.NoHealthz = true
	c.MaxPods = 250
	if _, err := c.WriteFiles(); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(c.configFile())
	for _, want := range []string{"address: 10.1.2.3\n", "healthzPort: 0\n", "mode: Webhook", "\nmaxPods: 250\n"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	for _, unwanted := range []string{"healthzBindAddress", "clusterDNS", "clusterDomain", "0.0.0.0"} {
		if strings.Contains(string(cfg), unwanted) {
			t.Errorf("config has %q:\n%s", unwanted, cfg)
		}
	}
}
