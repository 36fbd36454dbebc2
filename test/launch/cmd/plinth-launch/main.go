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

	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// storageClass is the StorageClass plinth-node serves. TODO(provisioner):
// take it from the node packages' constants once they exist.
const storageClass = "local"

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
	flag.Parse()
	if err := run(*dir, *bin, *plinthNode, nodeArgs, *dataSize<<30); err != nil {
		fmt.Fprintf(os.Stderr, "plinth-launch: %v\n", err)
		var busy *launch.BusyError
		if errors.As(err, &busy) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(dir, bin, plinthNode string, nodeArgs []string, dataSize int64) error {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-signals
		cancel()
	}()

	cfg := launch.Config{Dir: dir, KubernetesBin: bin, DataSize: dataSize, Log: os.Stderr}
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
	example := filepath.Join(dir, "example.yaml")
	if err := os.WriteFile(example, []byte(exampleYAML), 0o644); err != nil {
		return errors.Join(err, c.Stop(context.Background()))
	}
	_, scErr := c.Client.StorageV1().StorageClasses().Get(ctx, storageClass, metav1.GetOptions{})
	printSummary(c, ready, example, plinthNode != "", scErr == nil)

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
Images preloaded (use imagePullPolicy: Never): %s, %s.
`, c.NodeName, ready.Seconds(), c.Kubeconfig, kubectl, c.Dir, c.LogDir, c.DataDir,
		quotaWord(c.QuotaEnforced), nodeWord(plinthNode), images.BusyboxRef, images.PauseRef)
	if storage {
		fmt.Printf(`
Storage: StorageClass %q. Try the example PVC + pod:

  kubectl apply -f %s
  kubectl get pvc,pod

%s`, storageClass, example, exampleYAML)
	} else {
		fmt.Printf(`
Storage: NOT AVAILABLE yet. There is no StorageClass %q in this cluster
because plinth-node has no provisioner and CSI plugin yet, so a PVC would stay
Pending. Plain pods work. Once storage exists, this example gets a Bound PVC
and a Running pod:

  kubectl apply -f %s

%s`, storageClass, example, exampleYAML)
	}
	fmt.Printf("\nCtrl-C stops the cluster and cleans up.\n")
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

const exampleYAML = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: example
spec:
  storageClassName: ` + storageClass + `
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: example
spec:
  containers:
  - name: writer
    image: plinth.local/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, 'date >> /data/log; df -h /data; sleep 3600']
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: example
`
