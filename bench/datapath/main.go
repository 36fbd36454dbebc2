// Command datapath measures what a workload feels once it has a volume
// (issue 40, item 1): fio in a pod on a Plinth claim, against the same fio
// in the same kind of pod on a plain path of the same data filesystem, in
// the same run.
//
// On test/launch's cluster (the node `make run` starts: real kubelet and
// containerd, plinth-node, the data filesystem XFS on a loop device with
// direct I/O), eight
// targets; the files they use are written once in full before the rounds:
//
//   - floor-dir-pod: a runc pod's fio on a file in a plain directory of
//     the data filesystem (hostPath), the filesystem volumes' baseline;
//   - floor-dir-node: the node's own fio on the same file, outside any pod;
//   - filesystem runc and filesystem gvisor: a pod's fio on a file in one
//     filesystem claim, under runc and under gVisor (RuntimeClass gvisor);
//   - floor-volfile-pod: a runc pod's fio on that claim's file, through a
//     hostPath of the file: the same file without Plinth's publication;
//   - floor-image-pod: a runc pod's fio with O_DIRECT on the block
//     volume's own image file (hostPath of the file, the file its loop
//     device reads), the block volume's baseline;
//   - floor-image-node: the node's own fio on the same image file;
//   - block runc: a pod's fio on the block claim's device.
//
// The in-pod floors have the volumes' image, resources and runtime, so a
// volume's ratio to its floor is what Plinth adds; the node's floors show
// what the pod itself costs.
//
// With -node vm, on the VM node instead (test/nodevm: the node image
// booted in qemu under TCG, its data filesystem on a virtio disk, joined
// to a control plane on this host; fio's image is added to the node
// image, as the tests' images are): the six in-pod targets, without the
// node's own fio (node.go). Results are named datapath-vm-*.
//
// Each round runs every workload (fio.go) on every target in turn, one
// fio run per target, so that drift of the machine spreads over all of
// them; the report shows median and spread of the rounds and the ratio of
// each volume's median to its floor's. The goals' verdicts read each
// round's ratio of a volume to its floor, run minutes apart, and the
// confidence interval of those ratios' median (results.go): met, NOT met,
// or undecided when the rounds cannot tell. -targets runs some targets
// alone, so that many rounds of a few fit in one sitting.
//
//	go run ./bench/datapath -out DIR [-node host|vm] [-rounds N] [-targets T,...] [-label L] [-quick]
//
// Needs root (test/launch; the VM node's IP on this host's lo), fio
// (build/scripts/apt-install.sh fio: the pods' image is made of it) and,
// on the host node, gVisor's binaries ($PLINTH_GVISOR_BIN,
// third_party/gvisor/build.sh); on the VM node PLINTH_K8S_BIN and
// PLINTH_SNAPSHOT_BIN (bench.sh exports both).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/result"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/nodevm"
)

type options struct {
	out    string
	dir    string
	node   string
	rounds int
	// targets, when set, are the only targets the rounds run.
	targets []string
	// label names the results apart from the default run's.
	label  string
	timing timing
	quick  bool
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.StringVar(&o.dir, "dir", "/tmp/plinth-datapath", "the cluster's work directory (wiped at start)")
	flag.StringVar(&o.node, "node", "host", "host: test/launch's node (make run's); vm: the VM node (test/nodevm)")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds: each runs every workload on every target once")
	flag.DurationVar(&o.timing.ramp, "ramp", time.Second, "each job's ramp, not counted")
	flag.DurationVar(&o.timing.runtime, "runtime", 3*time.Second, "each job's measured time")
	flag.StringVar(&o.label, "label", "", "a name in the results' names (datapath-[NODE-]LABEL-...), for a run beside the default one in one report")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 1 round of 1 s jobs")
	flag.Func("targets", "comma-separated targets the rounds run (default: all the node's); a volume's results need its first floor among them", func(v string) error {
		o.targets = strings.Split(v, ",")
		return nil
	})
	flag.Parse()
	if o.quick {
		o.rounds, o.timing = 1, timing{ramp: time.Second, runtime: time.Second}
	}
	if o.out == "" || o.rounds < 1 || (o.node != "host" && o.node != "vm") {
		fmt.Fprintln(os.Stderr, "datapath: -out is required, -rounds at least 1, -node host or vm")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "datapath: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	var n node = hostNode{}
	if o.node == "vm" {
		n = vmNode{}
	}
	for _, t := range o.targets {
		if !slices.Contains(n.targets(), t) {
			return fmt.Errorf("-targets: %q is not a target of the %s node (%s)", t, o.node, strings.Join(n.targets(), ", "))
		}
	}
	// start gives b the started node in place of n.
	b := &bench{node: n, timing: o.timing, only: o.targets}
	targets := len(b.targets())
	fmt.Printf("datapath: %d rounds of %d workloads on %d targets (%s node); expected wall time about %s\n",
		o.rounds, len(workloads), targets, o.node, expected(o, targets).Round(time.Minute))
	tmp, done, err := cluster.WorkDir("datapath", "datapath-", o.out)
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	img, err := images.Fio(ctx, images.DefaultFio)
	if err != nil {
		return err
	}
	archive := filepath.Join(tmp, "fio.tar")
	if err := img.WriteFile(archive); err != nil {
		return fmt.Errorf("writing the fio image: %w", err)
	}
	start := startHost
	if o.node == "vm" {
		start = startVM
	}
	stopNode, err := start(ctx, o, tmp, archive, b)
	if stopNode != nil {
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			err = errors.Join(err, stopNode(stopCtx))
		}()
	}
	if err != nil {
		return err
	}
	runs, err := b.measure(ctx, o.rounds)
	if err != nil {
		return err
	}
	for _, r := range buildResults(runs, b.node.name(), o.label, b.notes(o)) {
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	return nil
}

// expected is the run's wall time: each job with its ramp and fio's
// start, each round's pods; on the VM node a boot and pods that start
// slower under TCG.
func expected(o options, targets int) time.Duration {
	pod, setup := 4*time.Second, 2*time.Minute
	if o.node == "vm" {
		pod, setup = 12*time.Second, 4*time.Minute
	}
	perRound := time.Duration(targets) * (time.Duration(len(workloads))*(o.timing.ramp+o.timing.runtime+500*time.Millisecond) + pod)
	return time.Duration(o.rounds)*perRound + setup
}

// startHost starts test/launch's cluster, with fio's image (archive)
// imported, and gives b its client and node; the returned func stops it.
func startHost(ctx context.Context, o options, tmp, archive string, b *bench) (func(context.Context) error, error) {
	gvisor := os.Getenv(launch.GVisorBinEnv)
	if gvisor == "" {
		return nil, fmt.Errorf("$%s is not set: the filesystem volume is measured under gVisor too (third_party/gvisor/build.sh)", launch.GVisorBinEnv)
	}
	bin, err := cluster.BuildPlinthNode(ctx, tmp)
	if err != nil {
		return nil, err
	}
	c, err := launch.Start(ctx, launch.Config{
		Dir:        o.dir,
		PlinthNode: &launch.PlinthNode{Binary: bin},
		GVisorBin:  gvisor,
		Images:     []string{archive},
		// The data filesystem on this host's disk, not its page cache.
		// Buffered, the cache served it, and one file read 164k IOPS
		// (4k, depth 32) from a pod and 27k from the node in one run
		// of 2026-11-30: figures of memory and CPU, not of a disk.
		DataDirectIO: true,
		WaitForLock:  true,
		Log:          os.Stderr,
	})
	if err != nil {
		return nil, err
	}
	dataDir, err := filepath.EvalSymlinks(c.DataDir)
	if err != nil {
		return c.Stop, fmt.Errorf("resolving the data directory: %w", err)
	}
	b.client, b.node = c.Client, hostNode{dataDir: dataDir}
	return c.Stop, nil
}

// startVM starts a control plane on this host and boots the VM node from
// the node image's test variant with fio's image (archive) added, and
// gives b its client and node; the returned func stops both.
func startVM(ctx context.Context, _ options, tmp, archive string, b *bench) (_ func(context.Context) error, err error) {
	image, kernel, err := nodevm.TestImage(ctx, archive)
	if err != nil {
		return nil, err
	}
	cp, err := launch.StartControlPlane(ctx, launch.ControlPlaneConfig{
		Dir: filepath.Join(tmp, "cp"), Scheduler: true, StorageObjects: true, SnapshotAPI: true,
	})
	if err != nil {
		return nil, err
	}
	var n *nodevm.Node
	stop := func(ctx context.Context) error {
		var err error
		if n != nil {
			err = n.Close(ctx)
		}
		return errors.Join(err, cp.Stop(ctx))
	}
	n, err = nodevm.New(nodevm.Config{Dir: filepath.Join(tmp, "node"), Kernel: kernel, Image: image, ControlPlane: cp})
	if err != nil {
		return stop, err
	}
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	begin := time.Now()
	if err := n.Boot(bctx); err != nil {
		return stop, err
	}
	if err := n.WaitReady(bctx); err != nil {
		return stop, fmt.Errorf("%w (consoles in %s)", err, filepath.Join(tmp, "node"))
	}
	fmt.Printf("datapath: VM node Ready with storage in %.1f s\n", time.Since(begin).Seconds())
	if err := launch.CreateGVisorRuntimeClass(ctx, cp.Client); err != nil {
		return stop, err
	}
	b.client, b.node = cp.Client, vmNode{client: cp.Client}
	return stop, nil
}
