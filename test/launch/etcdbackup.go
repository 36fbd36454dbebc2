package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Backing up and restoring the cluster's etcd the way an operator does
// (etcdctl snapshot save against the running etcd; etcdutl snapshot
// restore into a fresh data directory with the control plane stopped), for
// the tests of what a node does when the cluster's state goes back in
// time. The Kubernetes binaries hold etcd but neither tool;
// third_party/etcdtools/build.sh builds both at etcd's version.

// EtcdToolsBinEnv names the environment variable that points at the
// output of third_party/etcdtools/build.sh. The make targets set it;
// without it, EtcdToolsBinaries runs the build script itself.
const EtcdToolsBinEnv = "PLINTH_ETCD_TOOLS_BIN"

// EtcdToolsBinaries returns the directory with etcdctl and etcdutl:
// $PLINTH_ETCD_TOOLS_BIN, or else the output of
// third_party/etcdtools/build.sh (cached; about 35 s cold, its
// progress going to log).
func EtcdToolsBinaries(ctx context.Context, log io.Writer) (string, error) {
	return prebuiltOrBuild(ctx, log, EtcdToolsBinEnv, "etcdtools")
}

// etcdName is the member name of the cluster's one-member etcd; a restore
// must give the member the same name and peer URL.
const etcdName = "plinth"

// restoreRevisionBump is how far a restore moves etcd's revision past the
// snapshot's, and marks everything before compacted, as the Kubernetes
// documentation advises: a client that watched the cluster before the
// restore is told its resource version is gone and lists again, rather
// than waiting for revisions the restored etcd hands out anew.
const restoreRevisionBump = 1_000_000_000

func (c *Cluster) etcdDataDir() string { return filepath.Join(c.Dir, "etcd") }

// SaveEtcdSnapshot takes a snapshot of the running etcd into path, with
// etcdctl snapshot save.
func (c *Cluster) SaveEtcdSnapshot(ctx context.Context, path string) error {
	tools, err := EtcdToolsBinaries(ctx, c.logw)
	if err != nil {
		return fmt.Errorf("saving etcd snapshot: %w", err)
	}
	if err := runEtcdTool(ctx, tools, "etcdctl", "--endpoints="+c.etcdURL, "snapshot", "save", path); err != nil {
		return fmt.Errorf("saving etcd snapshot: %w", err)
	}
	return nil
}

// controlPlaneComponents are what a restore stops and starts again, in
// start order: etcd, and every component that caches the API's state.
// The node's components (kubelet, plinth-node) are the caller's to
// restart.
var controlPlaneComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "snapshot-controller"}

// RestoreEtcdSnapshot restores a snapshot SaveEtcdSnapshot took: it stops
// the control plane's running components, restores the snapshot with
// etcdutl into a fresh data directory, puts that in place of etcd's, and
// starts the components again, returning once the API server is ready.
// After an error the control plane may be left stopped.
func (c *Cluster) RestoreEtcdSnapshot(ctx context.Context, snapshot string) error {
	// Found (or built) before anything stops.
	tools, err := EtcdToolsBinaries(ctx, c.logw)
	if err != nil {
		return fmt.Errorf("restoring etcd snapshot: %w", err)
	}
	var stopped []string
	for _, name := range slices.Backward(controlPlaneComponents) {
		if c.running(name) == nil {
			continue
		}
		if err := c.Kill(name); err != nil {
			return fmt.Errorf("restoring etcd snapshot: %w", err)
		}
		stopped = append([]string{name}, stopped...)
	}
	fresh := c.etcdDataDir() + ".restored"
	if err := os.RemoveAll(fresh); err != nil {
		return fmt.Errorf("restoring etcd snapshot: %w", err)
	}
	if err := runEtcdTool(ctx, tools, "etcdutl", "snapshot", "restore", snapshot,
		"--data-dir="+fresh,
		"--name="+etcdName,
		"--initial-cluster="+etcdName+"="+c.etcdPeerURL,
		"--initial-advertise-peer-urls="+c.etcdPeerURL,
		fmt.Sprintf("--bump-revision=%d", restoreRevisionBump),
		"--mark-compacted"); err != nil {
		return fmt.Errorf("restoring etcd snapshot: %w", err)
	}
	if err := os.RemoveAll(c.etcdDataDir()); err != nil {
		return fmt.Errorf("restoring etcd snapshot: %w", err)
	}
	if err := os.Rename(fresh, c.etcdDataDir()); err != nil {
		return fmt.Errorf("restoring etcd snapshot: %w", err)
	}
	for _, name := range stopped {
		if err := c.Restart(name); err != nil {
			return fmt.Errorf("restoring etcd snapshot: %w", err)
		}
	}
	if err := c.waitAPIServerReady(ctx); err != nil {
		return fmt.Errorf("restoring etcd snapshot: %w", err)
	}
	c.mark("etcd snapshot restored")
	return nil
}

// runEtcdTool runs etcdctl or etcdutl of the directory tools with args;
// the error holds its output.
func runEtcdTool(ctx context.Context, tools, tool string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(tools, tool), args...)
	cmd.Env = []string{hostPATH}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, out)
	}
	return nil
}
