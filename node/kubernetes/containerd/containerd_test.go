package containerd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"source.plinth.dev/node/kubernetes/runcguard"

	"source.plinth.dev/test/images"
)

// The sandbox image must be the pause image the host's test cluster
// loads (the node image names its own SandboxImage).
func TestSandboxImageIsShipped(t *testing.T) {
	if SandboxImage != images.PauseRef {
		t.Fatalf("SandboxImage = %s, but the test cluster's pause image is %s", SandboxImage, images.PauseRef)
	}
}

// testConfig places containerd's files in a fresh directory.
func testConfig(t *testing.T) Config {
	dir := t.TempDir()
	return Config{
		ConfigFile: filepath.Join(dir, "run/containerd/config.toml"), Root: filepath.Join(dir, "data/containerd"),
		State: filepath.Join(dir, "run/containerd"), Socket: filepath.Join(dir, "run/containerd/containerd.sock"),
		CNIBinDir: "/usr/lib/cni", CNIConfDir: filepath.Join(dir, "cni/net.d"),
	}
}

func TestWriteConfigs(t *testing.T) {
	c := testConfig(t)
	if err := c.WriteConfig(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(c.ConfigFile)
	for _, want := range []string{`root = "` + c.Root + `"`, "SystemdCgroup = false", `snapshotter = "overlayfs"`, `sandbox_image = "plinth.local/pause:1"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("containerd config lacks %q:\n%s", want, b)
		}
	}
	// NoPivotRoot: runc pivots a container's root, on a node too (init
	// made the initramfs a mount with a parent, see leaveRootfs).
	for _, unwanted := range []string{"restrict_oom_score_adj", "runsc", "NoPivotRoot", "BinaryName"} {
		if strings.Contains(string(b), unwanted) {
			t.Errorf("a node's containerd config has %q:\n%s", unwanted, b)
		}
	}
	if err := c.WriteCNIConfig(CNI{Bridge: "plinth0", PodCIDR: "10.244.0.0/24", IPAMDir: "/run/cni"}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(c.CNIConfDir, "10-plinth.conflist"))
	var conf struct {
		Plugins []struct {
			Type   string `json:"type"`
			IPMasq bool   `json:"ipMasq"`
			IPAM   struct {
				Ranges [][]struct{ Subnet string } `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatalf("CNI config is not JSON: %v\n%s", err, raw)
	}
	if p := conf.Plugins; len(p) != 1 || p[0].Type != "bridge" || p[0].IPMasq || p[0].IPAM.Ranges[0][0].Subnet != "10.244.0.0/24" {
		t.Errorf("CNI config: %+v", conf)
	}
}

// TestWriteHostConfig: the host cluster's settings (test/launch) appear in
// the same template.
func TestWriteHostConfig(t *testing.T) {
	c := testConfig(t)
	c.RestrictOOMScoreAdj = true
	dir := t.TempDir()
	c.Runsc = &Runsc{
		Handler: "runsc", ConfigPath: filepath.Join(dir, "runsc.toml"), Binary: "/opt/gvisor/runsc",
		Root: filepath.Join(dir, "run/runsc"), Logs: filepath.Join(dir, "logs/runsc"),
	}
	if err := c.WriteConfig(); err != nil {
		t.Fatal(err)
	}
	shim, err := os.ReadFile(c.Runsc.ConfigPath)
	if err != nil {
		t.Fatalf("the shim's configuration: %v", err)
	}
	for _, want := range []string{
		`binary_name = "/opt/gvisor/runsc"`,
		`root = "` + c.Runsc.Root + `"`,
		`platform = "` + RunscPlatform + `"`,
		`systemd-cgroup = "false"`,
		`debug-log = "` + c.Runsc.Logs + `/%ID%/"`,
	} {
		if !strings.Contains(string(shim), want) {
			t.Errorf("the shim's configuration lacks %q:\n%s", want, shim)
		}
	}
	for _, d := range []string{c.Runsc.Root, c.Runsc.Logs} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("runsc's directory: %v", err)
		}
	}
	b, _ := os.ReadFile(c.ConfigFile)
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]`,
		`runtime_type = "io.containerd.runsc.v1"`,
		`ConfigPath = "` + c.Runsc.ConfigPath + `"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("host containerd config lacks %q:\n%s", want, b)
		}
	}
}

// TestWriteConfigGuardsRunc: with RuncGuard, the runc runtime runs the
// link to it, written twice over without complaint (every start).
func TestWriteConfigGuardsRunc(t *testing.T) {
	c := testConfig(t)
	c.RuncGuard = "/init"
	for range 2 {
		if err := c.WriteConfig(); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(filepath.Dir(c.ConfigFile), runcguard.Name)
	if to, err := os.Readlink(link); err != nil || to != "/init" {
		t.Errorf("the wrapper's link %s: %q, %v; want it to point to /init", link, to, err)
	}
	b, _ := os.ReadFile(c.ConfigFile)
	if want := `BinaryName = "` + link + `"`; !strings.Contains(string(b), want) {
		t.Errorf("containerd config lacks %q:\n%s", want, b)
	}
}
