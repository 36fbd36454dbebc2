package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/containerd"
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
	GVisorHandler = containerd.RunscHandler
	// GVisorBinEnv names the environment variable with the gVisor binaries'
	// directory (what third_party/gvisor/build.sh prints); the make targets
	// set it and pass it on as Config.GVisorBin.
	GVisorBinEnv = "PLINTH_GVISOR_BIN"
)

// gvisorBinaries are the files Config.GVisorBin must hold.
var gvisorBinaries = []string{"runsc", "containerd-shim-runsc-v1"}

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

// runsc is the host node's gVisor runtime in containerd, or nil when the
// cluster has no gVisor (containerd then gets no runsc runtime). Its state
// is below the work directory, so teardown and the host snapshot find the
// sandboxes by their command lines; its logs are with the cluster's.
func (c *Cluster) runsc() *containerd.Runsc {
	if c.GVisorBin == "" {
		return nil
	}
	return &containerd.Runsc{
		Handler:    GVisorHandler,
		ConfigPath: filepath.Join(c.Dir, "runsc.toml"),
		Binary:     filepath.Join(c.GVisorBin, "runsc"),
		Root:       filepath.Join(c.Dir, "run", "runsc"),
		Logs:       filepath.Join(c.LogDir, "runsc"),
	}
}

// applyRuntimeClasses creates the gvisor RuntimeClass when the cluster has
// gVisor; without it, a pod naming the class is rejected at admission
// instead of failing on the node.
func (c *Cluster) applyRuntimeClasses(ctx context.Context) error {
	if c.GVisorBin == "" {
		return nil
	}
	return CreateGVisorRuntimeClass(ctx, c.Client)
}

// CreateGVisorRuntimeClass creates the RuntimeClass GVisorRuntimeClass,
// whose handler is containerd's runsc runtime; one already there is kept.
func CreateGVisorRuntimeClass(ctx context.Context, cs kubernetes.Interface) error {
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: GVisorRuntimeClass}, Handler: GVisorHandler}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
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
	rs := []Runtime{RuncRuntime()}
	if c.GVisorBin != "" {
		rs = append(rs, GVisorRuntime())
	}
	return rs
}

// RuncRuntime is a node's default runtime, runc.
func RuncRuntime() Runtime { return Runtime{Name: "runc", Block: true} }

// GVisorRuntime is gVisor, under the RuntimeClass CreateGVisorRuntimeClass
// makes: on the host node with Config.GVisorBin, on a Plinth node whose
// image has runsc.
func GVisorRuntime() Runtime {
	class := GVisorRuntimeClass
	return Runtime{Name: "gvisor", RuntimeClassName: &class, NoBlockReason: gvisorNoBlock}
}
