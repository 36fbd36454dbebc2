package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gVisor: when Config.GVisorBin names a directory with runsc and
// containerd-shim-runsc-v1 (third_party/gvisor/build.sh), containerd gets a
// runtime handler GVisorHandler and the cluster a RuntimeClass
// GVisorRuntimeClass, so a pod with runtimeClassName: gvisor runs in a
// gVisor sandbox while every other pod keeps runc.
const (
	// GVisorRuntimeClass is the RuntimeClass a pod names to run under
	// gVisor.
	GVisorRuntimeClass = "gvisor"
	// GVisorHandler is containerd's name for the runsc runtime, the
	// RuntimeClass's handler.
	GVisorHandler = "runsc"
	// GVisorBinEnv names the environment variable with the gVisor binaries'
	// directory (what third_party/gvisor/build.sh prints); the make targets
	// set it and pass it on as Config.GVisorBin.
	GVisorBinEnv = "PLINTH_GVISOR_BIN"
	// GVisorPlatform is how the sandbox intercepts the application's
	// system calls: systrap, gVisor's default, which needs no
	// virtualisation. (kvm would be faster but hangs on this kind of host, a
	// VM whose /dev/kvm is nested; ptrace works too but is slower. See
	// third_party/gvisor/README.md.)
	GVisorPlatform = "systrap"
)

// gvisorBinaries are the files Config.GVisorBin must hold.
var gvisorBinaries = []string{"runsc", "containerd-shim-runsc-v1"}

// runscConfig is the shim's configuration (the runtime's ConfigPath): which
// runsc to start, where it keeps its state and logs, and runsc's flags.
//   - binary_name: the shim runs runsc by absolute path (containerd finds
//     the shim on its PATH, see containerdPATH).
//   - root: runsc's state below the work directory, so teardown and the
//     host snapshot find the sandboxes by their command lines.
//   - systemd-cgroup=false: the kubelet and runc use the cgroupfs driver;
//     runsc must put sandboxes into the same cgroupfs paths.
var runscConfig = template.Must(template.New("runsc").Parse(`# containerd-shim-runsc-v1 configuration, written by test/launch.
binary_name = "{{.Runsc}}"
root = "{{.Root}}"
log_path = "{{.Logs}}/%ID%/shim.log"
log_level = "info"

[runsc_config]
  platform = "{{.Platform}}"
  systemd-cgroup = "false"
  debug-log = "{{.Logs}}/%ID%/"
`))

// checkGVisorBinaries fails when dir lacks one of the gVisor binaries.
func checkGVisorBinaries(dir string) error {
	for _, b := range gvisorBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("gVisor binaries in %s: %w", dir, err)
		}
	}
	return nil
}

// containerdPATH is containerd's PATH: the host's, behind the gVisor
// directory when there is one. containerd looks shims up on its PATH;
// containerd 1.6 ignores a runtime's runtime_path when it starts a pod
// sandbox ("failed to start shim: failed to resolve runtime path: runtime
// "io.containerd.runsc.v1" binary not installed "containerd-shim-runsc-v1""),
// so the shim cannot be named by absolute path there.
func (c *Cluster) containerdPATH() string {
	if c.GVisorBin == "" {
		return hostPATH
	}
	return "PATH=" + c.GVisorBin + ":" + strings.TrimPrefix(hostPATH, "PATH=")
}

// runscConfigPath is where the shim's configuration is written, or "" when
// the cluster has no gVisor (containerd then gets no runsc runtime).
func (c *Cluster) runscConfigPath() string {
	if c.GVisorBin == "" {
		return ""
	}
	return filepath.Join(c.Dir, "runsc.toml")
}

// writeRunscConfig writes the shim's configuration; no-op without gVisor.
func (c *Cluster) writeRunscConfig() error {
	if c.GVisorBin == "" {
		return nil
	}
	logs := filepath.Join(c.LogDir, "runsc")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return fmt.Errorf("creating runsc log directory: %w", err)
	}
	return writeTemplate(c.runscConfigPath(), runscConfig, map[string]string{
		"Runsc":    filepath.Join(c.GVisorBin, "runsc"),
		"Root":     filepath.Join(c.Dir, "run", "runsc"),
		"Logs":     logs,
		"Platform": GVisorPlatform,
	})
}

// applyRuntimeClasses creates the gvisor RuntimeClass when the cluster has
// gVisor; without it, a pod naming the class is rejected at admission
// instead of failing on the node.
func (c *Cluster) applyRuntimeClasses(ctx context.Context) error {
	if c.GVisorBin == "" {
		return nil
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: GVisorRuntimeClass}, Handler: GVisorHandler}
	if _, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating RuntimeClass %s: %w", rc.Name, err)
	}
	return nil
}

// Runtime is a container runtime that pods of a cluster can run under,
// with what it can do for volumes, so a test can run the same workload
// under each and skip only what the runtime cannot do.
type Runtime struct {
	// Name labels the runtime in test names and reports: "runc", "gvisor".
	Name string
	// RuntimeClassName is what a pod sets in spec.runtimeClassName; nil
	// for the node's default runtime (runc).
	RuntimeClassName *string
	// Block reports whether raw block claims (volumeDevices) reach the
	// container as block devices. NoBlockReason says why not.
	Block         bool
	NoBlockReason string
}

// gvisorNoBlock is why block claims are skipped under gVisor. test/e2e
// (TestGVisorVolumes) checks that a block claim really does not reach a
// gVisor container as a device, so this stays true.
const gvisorNoBlock = "gVisor has no driver for host block devices: the volumeDevices node " +
	"exists in the sandbox's /dev, but opening it fails with ENXIO (no such device or address)"

// Runtimes lists the runtimes of the cluster: runc always, gVisor when the
// cluster was started with its binaries.
func (c *Cluster) Runtimes() []Runtime {
	rs := []Runtime{{Name: "runc", Block: true}}
	if c.GVisorBin != "" {
		class := GVisorRuntimeClass
		rs = append(rs, Runtime{Name: "gvisor", RuntimeClassName: &class, NoBlockReason: gvisorNoBlock})
	}
	return rs
}
