// Command datapath measures what a workload feels once it has a volume
// (issue 40, item 1): fio in a pod on a Plinth claim, against the same fio
// in the same kind of pod on a plain path of the same data filesystem, in
// the same run.
//
// On test/launch's cluster (the node `make run` starts: real kubelet and
// containerd, plinth-node, the data filesystem XFS on a loop device), seven
// targets; the files they use are written once in full before the rounds:
//
//   - floor-dir-pod: a runc pod's fio on a file in a plain directory of
//     the data filesystem (hostPath), the filesystem volumes' baseline;
//   - floor-dir-node: the node's own fio on the same file, outside any pod;
//   - filesystem runc and filesystem gvisor: a pod's fio on a file in one
//     filesystem claim, under runc and under gVisor (RuntimeClass gvisor);
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
// Each round runs every workload (fio.go) on every target in turn, one
// fio run per target, so that drift of the machine spreads over all of
// them; the report shows median and spread of the rounds and the ratio of
// each volume's median to its floor's.
//
//	go run ./bench/datapath -out DIR [-rounds N] [-quick]
//
// Needs root (test/launch), fio (build/scripts/apt-install.sh fio) and
// gVisor's binaries ($PLINTH_GVISOR_BIN, third_party/gvisor/build.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/result"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

type options struct {
	out    string
	dir    string
	rounds int
	timing timing
	quick  bool
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.StringVar(&o.dir, "dir", "/tmp/plinth-datapath", "the cluster's work directory (wiped at start)")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds: each runs every workload on every target once")
	flag.DurationVar(&o.timing.ramp, "ramp", time.Second, "each job's ramp, not counted")
	flag.DurationVar(&o.timing.runtime, "runtime", 3*time.Second, "each job's measured time")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 1 round of 1 s jobs")
	flag.Parse()
	if o.quick {
		o.rounds, o.timing = 1, timing{ramp: time.Second, runtime: time.Second}
	}
	if o.out == "" || o.rounds < 1 {
		fmt.Fprintln(os.Stderr, "datapath: -out is required, -rounds at least 1")
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
	perRound := time.Duration(len(workloads)*len(targetNames)) * (o.timing.ramp + o.timing.runtime + 500*time.Millisecond)
	fmt.Printf("datapath: %d rounds of %d workloads on %d targets; expected wall time about %s\n",
		o.rounds, len(workloads), len(targetNames), (time.Duration(o.rounds)*(perRound+20*time.Second) + 2*time.Minute).Round(time.Minute))
	gvisor := os.Getenv(launch.GVisorBinEnv)
	if gvisor == "" {
		return fmt.Errorf("$%s is not set: the filesystem volume is measured under gVisor too (third_party/gvisor/build.sh)", launch.GVisorBinEnv)
	}
	tmp, done, err := cluster.WorkDir("datapath", "datapath-", o.out)
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	bin, err := cluster.BuildPlinthNode(ctx, tmp)
	if err != nil {
		return err
	}
	img, err := images.Fio(ctx, images.DefaultFio)
	if err != nil {
		return err
	}
	archive := filepath.Join(tmp, "fio.tar")
	if err := img.WriteFile(archive); err != nil {
		return fmt.Errorf("writing the fio image: %w", err)
	}
	c, err := launch.Start(ctx, launch.Config{
		Dir:         o.dir,
		PlinthNode:  &launch.PlinthNode{Binary: bin},
		GVisorBin:   gvisor,
		Images:      []string{archive},
		WaitForLock: true,
		Log:         os.Stderr,
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		err = errors.Join(err, c.Stop(stopCtx))
	}()
	b := &bench{c: c, timing: o.timing}
	runs, err := b.measure(ctx, o.rounds)
	if err != nil {
		return err
	}
	for _, r := range buildResults(runs, b.notes(o)) {
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	return nil
}
