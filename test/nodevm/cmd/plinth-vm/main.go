// Command plinth-vm runs a Plinth node booted from the node image in a qemu
// VM, joined to a control plane on this host, until Ctrl-C (`make run-vm`).
// The node's data disk stays in the work directory, so the next run boots
// the same node again (its volumes intact); -fresh starts from a blank disk.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/nodevm"
)

func main() {
	dir := flag.String("dir", "/tmp/plinth-vm", "work directory: the node's disks and console logs stay, the control plane is started anew")
	bin := flag.String("k8s-bin", os.Getenv(launch.BinEnv), "directory with the Kubernetes binaries (default: build them)")
	snapshots := flag.String("snapshot-bin", os.Getenv(launch.SnapshotBinEnv), "directory with the snapshot-controller and its CRDs (default: build them)")
	kernel := flag.String("kernel", "", "vmlinux to boot (test/ktest/kernel.sh prints its directory)")
	image := flag.String("image", "", "the node image (initramfs) from build/scripts/nodeimage.sh")
	fresh := flag.Bool("fresh", false, "start from a blank data disk (a new machine)")
	console := flag.Bool("console", false, "print the VM's console on stderr (it is always in <dir>/node/console-N.log)")
	flag.Parse()
	if err := run(*dir, *bin, *snapshots, *kernel, *image, *fresh, *console); err != nil {
		fmt.Fprintf(os.Stderr, "plinth-vm: %v\n", err)
		os.Exit(1)
	}
}

func run(dir, bin, snapshots, kernel, image string, fresh, console bool) error {
	if kernel == "" || image == "" {
		return errors.New("-kernel and -image are required")
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-signals
		cancel()
	}()

	nodeDir := filepath.Join(dir, "node")
	if fresh {
		if err := os.Remove(filepath.Join(nodeDir, "data.img")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	cpDir := filepath.Join(dir, "cp")
	if err := os.RemoveAll(cpDir); err != nil {
		return err
	}
	start := time.Now()
	cp, err := launch.StartControlPlane(ctx, launch.ControlPlaneConfig{
		Dir: cpDir, KubernetesBin: bin, Scheduler: true, StorageObjects: true, Log: os.Stderr,
		SnapshotAPI: true, SnapshotBin: snapshots,
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		_ = cp.Stop(stopCtx)
	}()
	var out io.Writer = io.Discard
	if console {
		out = os.Stderr
	}
	node, err := nodevm.New(nodevm.Config{Dir: nodeDir, Kernel: kernel, Image: image, ControlPlane: cp, Console: out, MetricsPort: nodevm.MetricsPort})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "stopping the node ...")
		closeCtx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
		defer stop()
		if err := node.Close(closeCtx); err != nil {
			fmt.Fprintf(os.Stderr, "plinth-vm: %v\n", err)
		}
	}()
	booted := time.Now()
	if err := node.Boot(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "control plane up in %.1fs; node %s booting (console: %s)\n", booted.Sub(start).Seconds(), node.Name(), nodeDir)
	if err := node.WaitReady(ctx); err != nil {
		return err
	}
	fmt.Printf(`
Plinth VM node %s is Ready with storage %s registered, %.1fs after qemu started.

  export KUBECONFIG=%s
  alias kubectl=%s
  kubectl get nodes -o wide

plinth-node's metrics: http://%s/metrics (also /healthz, /readyz).
The node's data disk (XFS with project quotas, enforced) is %s;
the next run boots it again (-fresh for a blank one). Console logs: %s.
Example claim and pod (kubectl apply -f -):

%s
Ctrl-C stops the node cleanly, then the control plane.
`, node.Name(), names.DriverName, time.Since(booted).Seconds(), cp.Kubeconfig, filepath.Join(cp.BinDir, "kubectl"),
		node.MetricsAddress(), node.DataDisk, nodeDir, launch.ExampleYAML)

	select {
	case <-ctx.Done():
	case <-node.VM().Done():
		return fmt.Errorf("the VM ended: %v (console in %s)", node.VM().Err(), nodeDir)
	}
	return nil
}
