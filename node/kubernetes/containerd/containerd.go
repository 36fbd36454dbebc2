// Package containerd runs a booted node's container runtime: containerd
// with its CRI plugin, as a supervised process with a configuration the
// node writes itself, and the import of the images the node image ships.
//
// The configuration differs from a stock one where the node does:
//   - the root (images, snapshots) is on the data partition, the only
//     disk; the state (sockets, shim bundles) is on /run, which ends with
//     the boot like the containers it describes;
//   - cgroupfs (SystemdCgroup = false): there is no systemd, and the
//     kubelet uses the same driver;
//   - no registry is ever reached: every image a node runs is imported
//     from the node image (ImportImages), the sandbox image included;
//   - with RuncGuard, the runc runtime runs runc through plinth-node's
//     wrapper (package runcguard), which denies containers the ioctls
//     that reach past their volumes.
//
// test/launch's host cluster writes its containerd configuration with
// WriteConfig too, so there is one template; the fields after Runsc are
// what a host needs differently.
package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"source.plinth.dev/node/kubernetes/runcguard"
	"source.plinth.dev/pkg/process"
	"source.plinth.dev/pkg/supervisor"
)

// SandboxImage is the pod sandbox ("pause") image. The node image ships it
// (build/nodeimage builds node/cmd/pause under this name), and the host's
// test cluster loads it (test/images builds it as images.PauseRef).
const SandboxImage = "plinth.local/pause:1"

// Namespace is containerd's namespace of the CRI plugin, where the
// kubelet's images must be.
const Namespace = "k8s.io"

// readyTimeout bounds containerd's start: it serves within a second on a
// real machine and within seconds under emulation; one that does not serve
// after this is restarted rather than waited for.
const readyTimeout = 2 * time.Minute

// Config places containerd's files and tells its CRI plugin about the
// node.
type Config struct {
	// Binary is containerd's executable (default "containerd" on PATH).
	Binary string
	// Ctr is the ctr tool used to import images (default "ctr").
	Ctr string
	// ConfigFile is where the node writes containerd's configuration.
	ConfigFile string
	// Root is containerd's persistent directory (on the data partition).
	Root string
	// State is containerd's runtime directory (on /run).
	State string
	// Socket is the gRPC socket the kubelet and ctr talk to.
	Socket string
	// CNIBinDir holds the CNI plugins; CNIConfDir the node's network
	// configuration (see WriteCNIConfig).
	CNIBinDir  string
	CNIConfDir string
	// Runsc, when set, adds gVisor as a runtime.
	Runsc *Runsc
	// RuncGuard, when set, is plinth-node's executable: WriteConfig links
	// it beside ConfigFile as runcguard.Name, and the runc runtime runs
	// that link instead of runc (BinaryName), which runs runc.
	RuncGuard string

	// The settings below differ between a node and the host cluster of
	// test/launch, which renders its containerd configuration here too.

	// RestrictOOMScoreAdj clamps a container's oom_score_adj to
	// containerd's own instead of failing the pod sandbox ("can't get final
	// child's PID from pipe"): hosts that drop CAP_SYS_RESOURCE (some
	// sandboxes) cannot lower it. A node has the capability.
	RestrictOOMScoreAdj bool
}

// Runsc is gVisor's runtime in containerd. containerd finds
// containerd-shim-runsc-v1 on its PATH; the shim starts Binary.
type Runsc struct {
	// Handler is the runtime's name, which a RuntimeClass's handler names.
	Handler string
	// ConfigPath is the shim's configuration file, which WriteConfig
	// writes from the fields below.
	ConfigPath string
	// Binary is runsc's absolute path.
	Binary string
	// Root is runsc's state directory (its sandboxes' records).
	Root string
	// Logs gets a directory per sandbox with the shim's log and runsc's
	// debug logs.
	Logs string
	// Platform is how the sandbox intercepts the application's system
	// calls (runsc --platform); empty means RunscPlatform.
	Platform string
}

// RunscHandler is the runsc runtime's name in containerd, which a
// RuntimeClass of gVisor names as its handler.
const RunscHandler = "runsc"

// RunscPlatform is the platform sandboxes run on unless Runsc.Platform
// says otherwise: systrap, gVisor's default, which needs no
// virtualisation. (kvm would be faster but hangs where /dev/kvm is nested,
// as on the test hosts; ptrace works too but is slower. See
// third_party/gvisor/README.md.)
const RunscPlatform = "systrap"

// runscTemplate is the shim's configuration:
//   - binary_name: the shim runs runsc by absolute path;
//   - systemd-cgroup=false: the kubelet and runc use the cgroupfs driver,
//     and runsc must put sandboxes into the same cgroupfs paths.
var runscTemplate = template.Must(template.New("runsc").Parse(`# containerd-shim-runsc-v1 configuration. Written on every start; edits are lost.
binary_name = "{{.Binary}}"
root = "{{.Root}}"
log_path = "{{.Logs}}/%ID%/shim.log"
log_level = "info"

[runsc_config]
  platform = "{{.Platform}}"
  systemd-cgroup = "false"
  debug-log = "{{.Logs}}/%ID%/"
`))

// writeConfig writes the shim's configuration and creates runsc's
// directories.
func (r Runsc) writeConfig() error {
	if r.Platform == "" {
		r.Platform = RunscPlatform
	}
	for _, d := range []string{filepath.Dir(r.ConfigPath), r.Root, r.Logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writing runsc's shim configuration: %w", err)
		}
	}
	var b strings.Builder
	if err := runscTemplate.Execute(&b, r); err != nil {
		return fmt.Errorf("writing runsc's shim configuration: %w", err)
	}
	if err := os.WriteFile(r.ConfigPath, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing runsc's shim configuration: %w", err)
	}
	return nil
}

func (c Config) binary() string { return orDefault(c.Binary, "containerd") }
func (c Config) ctr() string    { return orDefault(c.Ctr, "ctr") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

var configTemplate = template.Must(template.New("containerd").Parse(`# Written on every start; edits are lost.
version = 2
root = "{{.Root}}"
state = "{{.State}}"
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

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
{{- if .RestrictOOMScoreAdj}}
  restrict_oom_score_adj = true
{{- end}}
  # No AppArmor on the node (nor apparmor_parser in the image), and test
  # pods on a host need no profile.
  disable_apparmor = true
  # A block volume's device node in a container belongs to the pod's
  # runAsUser/runAsGroup: otherwise it is root's (0660), and a pod running
  # as a non-root user could not open its own block claim.
  device_ownership_from_security_context = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # The kubelet uses the cgroupfs driver; both must agree.
        SystemdCgroup = false
{{- if .RuncGuard}}
        # runc through plinth-node's wrapper (package runcguard).
        BinaryName = "{{.GuardLink}}"
{{- end}}
{{- with .Runsc}}
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{{.Handler}}]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{{.Handler}}.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "{{.ConfigPath}}"
{{- end}}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.CNIConfDir}}"
`))

// WriteConfig writes containerd's configuration file and creates its
// directories, and with Runsc the shim's configuration.
func (c Config) WriteConfig() error {
	for _, d := range []string{filepath.Dir(c.ConfigFile), c.Root, c.State, c.CNIConfDir, filepath.Dir(c.Socket)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writing containerd configuration: %w", err)
		}
	}
	if c.Runsc != nil {
		if err := c.Runsc.writeConfig(); err != nil {
			return err
		}
	}
	if c.RuncGuard != "" {
		if err := c.linkGuard(); err != nil {
			return err
		}
	}
	var b strings.Builder
	if err := configTemplate.Execute(&b, struct {
		Config
		SandboxImage string
		GuardLink    string
	}{c, SandboxImage, c.guardLink()}); err != nil {
		return fmt.Errorf("writing containerd configuration: %w", err)
	}
	if err := os.WriteFile(c.ConfigFile, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing containerd configuration: %w", err)
	}
	return nil
}

// guardLink is where WriteConfig links RuncGuard.
func (c Config) guardLink() string {
	return filepath.Join(filepath.Dir(c.ConfigFile), runcguard.Name)
}

// linkGuard makes guardLink a symbolic link to RuncGuard, replacing what
// is there.
func (c Config) linkGuard() error {
	link := c.guardLink()
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(c.RuncGuard, tmp); err != nil {
		return fmt.Errorf("linking runc's wrapper: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return fmt.Errorf("linking runc's wrapper: %w", err)
	}
	return nil
}

// Runnable is containerd as a supervised process: Healthy once its socket
// accepts connections. The configuration is rewritten on each start.
func (c Config) Runnable() supervisor.Runnable {
	spec := process.Spec{
		Path:         c.binary(),
		Args:         []string{"--config", c.ConfigFile},
		Ready:        process.UnixSocketReady(c.Socket),
		ReadyTimeout: readyTimeout,
	}
	daemon := process.Runnable(spec)
	return func(ctx context.Context) error {
		if err := c.WriteConfig(); err != nil {
			return err
		}
		// A socket left by a killed containerd would make the readiness
		// check talk to nobody; containerd replaces it anyway.
		_ = os.Remove(c.Socket)
		return daemon(ctx)
	}
}

// Ready reports whether containerd serves on its socket.
func (c Config) Ready(ctx context.Context) error {
	return process.UnixSocketReady(c.Socket)(ctx)
}

// CNI is the pod network of a node: one bridge, pod addresses from the
// node's pod range, no masquerading (pods talk to the outside only through
// the node's own address when something on the node routes them; the test
// VM's pods need no egress) and no port mapping.
type CNI struct {
	// Bridge is the bridge's link name.
	Bridge string
	// PodCIDR is the range pod addresses come from.
	PodCIDR string
	// IPAMDir is where host-local records handed-out addresses; it
	// belongs on /run, because the pods it records end with the boot.
	IPAMDir string
}

var cniTemplate = template.Must(template.New("cni").Parse(`{
  "cniVersion": "0.4.0",
  "name": "plinth",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{.Bridge}}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "{{.IPAMDir}}",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`))

// WriteCNIConfig writes n as the only network configuration in c's
// CNIConfDir.
func (c Config) WriteCNIConfig(n CNI) error {
	if err := os.MkdirAll(c.CNIConfDir, 0o755); err != nil {
		return fmt.Errorf("writing CNI configuration: %w", err)
	}
	var b strings.Builder
	if err := cniTemplate.Execute(&b, n); err != nil {
		return fmt.Errorf("writing CNI configuration: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.CNIConfDir, "10-plinth.conflist"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing CNI configuration: %w", err)
	}
	return nil
}
