// Command plinth-launch runs a single-node Kubernetes cluster with Plinth
// storage on this host until Ctrl-C (`make run`). See package launch.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/containerd"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// storageClass is the StorageClass plinth-node serves.
const storageClass = names.StorageClassName

// argList collects a repeatable flag.
type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }

func main() {
	dir := flag.String("dir", "/tmp/plinth-run", "work directory (wiped at start; logs stay after exit)")
	bin := flag.String("k8s-bin", os.Getenv(launch.BinEnv), "directory with the Kubernetes binaries (default: build them)")
	plinthNode := flag.String("plinth-node", "", "plinth-node binary to run on the node (empty: none)")
	var nodeArgs argList
	flag.Var(&nodeArgs, "plinth-node-arg", "extra argument for plinth-node (repeatable), after launch.PlinthNodeArgs")
	dataSize := flag.Int64("data-size-gib", 16, "size of the node's XFS data filesystem in GiB (sparse)")
	snapshots := flag.String("snapshot-bin", os.Getenv(launch.SnapshotBinEnv), "directory with the snapshot-controller and its CRDs (default: build them)")
	gvisor := flag.String("gvisor-bin", os.Getenv(launch.GVisorBinEnv), "directory with runsc and containerd-shim-runsc-v1 (empty: no gVisor RuntimeClass)")
	flag.Parse()
	cfg := launch.Config{Dir: *dir, KubernetesBin: *bin, SnapshotBin: *snapshots, DataSize: *dataSize << 30, GVisorBin: *gvisor, Log: os.Stderr}
	if err := run(cfg, *plinthNode, nodeArgs); err != nil {
		fmt.Fprintf(os.Stderr, "plinth-launch: %v\n", err)
		var busy *launch.BusyError
		if errors.As(err, &busy) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(cfg launch.Config, plinthNode string, nodeArgs []string) error {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	// `make run | tee run.log` and Ctrl-C: the terminal's SIGINT ends tee
	// too, and the next line written would kill this process by SIGPIPE
	// in the middle of its teardown, leaving mounts, loop devices and
	// processes behind. Ignored, the write fails with EPIPE and the
	// teardown goes on.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-signals
		cancel()
	}()

	if plinthNode != "" {
		cfg.PlinthNode = &launch.PlinthNode{Binary: plinthNode, Args: func(p launch.Paths) []string {
			return append(launch.PlinthNodeArgs(p), nodeArgs...)
		}}
	}
	start := time.Now()
	c, err := launch.Start(ctx, cfg)
	if err != nil {
		return err
	}
	ready := time.Since(start)
	example := filepath.Join(c.Dir, "example.yaml")
	if err := os.WriteFile(example, []byte(exampleYAML), 0o644); err != nil {
		return errors.Join(err, c.Stop(context.Background()))
	}
	storage := csiRegistered(ctx, c)
	printSummary(c, ready, example, plinthNode != "", storage)
	if !storage && plinthNode != "" {
		go announceStorage(ctx, c)
	}

	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "\nstopping the cluster (Ctrl-C again is ignored until cleanup is done) ...")
	case <-c.Failed():
		fmt.Fprintf(os.Stderr, "\nthe cluster failed: %v\nstopping ...\n", c.Err())
	}
	go func() {
		for range signals {
			fmt.Fprintln(os.Stderr, "still cleaning up, please wait ...")
		}
	}()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stopCancel()
	stopErr := c.Stop(stopCtx)
	if stopErr == nil {
		fmt.Fprintf(os.Stderr, "stopped; logs are in %s\n", c.LogDir)
	}
	return errors.Join(c.Err(), stopErr)
}

func printSummary(c *launch.Cluster, ready time.Duration, example string, plinthNode, storage bool) {
	kubectl := filepath.Join(c.BinDir, "kubectl")
	fmt.Printf(`
Plinth cluster is up: node %s Ready after %.1fs.

  export KUBECONFIG=%s
  alias kubectl=%s
  kubectl get nodes -o wide

Work directory %s (logs in %s).
Node data filesystem: XFS at %s (project quotas %s).
plinth-node: %s.
Images preloaded (use imagePullPolicy: Never): %s, %s, %s.
Runtimes: %s.
`, c.NodeName, ready.Seconds(), c.Kubeconfig, kubectl, c.Dir, c.LogDir, c.DataDir,
		quotaWord(c.QuotaEnforced), nodeWord(plinthNode), images.BusyboxRef, images.PauseRef, images.PersistentVolumeRef, runtimesWord(c))
	if storage {
		fmt.Printf(`
Storage: StorageClass %q. Try the example PVC + pod:

  kubectl apply -f %s
  kubectl get pvc,pod

Grow the claim while the pod runs, and see its new capacity:

  kubectl patch pvc example -p '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}'
  kubectl get pvc example

%s`, storageClass, example, exampleYAML)
	} else {
		fmt.Printf(`
Storage: NOT AVAILABLE (yet). The StorageClass %q exists, but plinth-node's
CSI plugin has not registered with the kubelet, so a PVC would stay Pending.
(This build of plinth-node may not run its provisioner and CSI plugin yet; a
line below announces it if it registers later.) Plain pods work. With
storage, this example gets a Bound PVC and a Running pod:

  kubectl apply -f %s

%s`, storageClass, example, exampleYAML)
	}
	fmt.Printf("\nCtrl-C stops the cluster and cleans up.\n")
}

// csiRegistered reports whether plinth-node's CSI plugin has registered
// with the kubelet: the node's CSINode object then lists the driver. That,
// not the StorageClass (which the launcher creates), says storage works.
func csiRegistered(ctx context.Context, c *launch.Cluster) bool {
	n, err := c.Client.StorageV1().CSINodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, d := range n.Spec.Drivers {
		if d.Name == names.DriverName {
			return true
		}
	}
	return false
}

// announceStorage prints one line once the CSI plugin registers.
func announceStorage(ctx context.Context, c *launch.Cluster) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if csiRegistered(ctx, c) {
			fmt.Printf("\nStorage is available now: plinth-node registered %s; StorageClass %q works.\n", names.DriverName, storageClass)
			return
		}
	}
}

// runtimesWord names the runtimes pods can use, and how to pick gVisor.
func runtimesWord(c *launch.Cluster) string {
	if c.GVisorBin == "" {
		return "runc only (no --gvisor-bin given)"
	}
	return fmt.Sprintf("runc (default); gVisor with runtimeClassName: %s (runsc from %s, platform %s)",
		launch.GVisorRuntimeClass, c.GVisorBin, containerd.RunscPlatform)
}

func nodeWord(running bool) string {
	if running {
		return "running (log: plinth-node.log)"
	}
	return "not started (no --plinth-node binary given)"
}

func quotaWord(enforced bool) string {
	if enforced {
		return "enforced"
	}
	return "NOT enforceable on this kernel"
}

// exampleYAML is printed in the summary and written next to the kubeconfig.
const exampleYAML = launch.ExampleYAML
