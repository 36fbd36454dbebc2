package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/fio"
	"source.plinth.dev/test/launch"
)

// The targets, in the order each round runs them. The floors the goals
// are read against run in a pod like the volumes' (same image, resources,
// runtime), on a hostPath: so a volume's ratio is what Plinth adds, not
// what a pod's cgroup and container cost. The node's own fio on the same
// paths is kept beside them, to show that cost.
const (
	// nodeDir and podDir: fio on a file in a plain directory of the data
	// filesystem, on the node and in a runc pod (hostPath).
	nodeDir = "floor-dir-node"
	podDir  = "floor-dir-pod"
	// fsRunc and fsGVisor: fio in a pod on a file in a filesystem claim.
	fsRunc   = "filesystem-runc"
	fsGVisor = "filesystem-gvisor"
	// podVolFile: fio in a runc pod on that claim's own file, reached by
	// a hostPath of the file instead of the claim. It reads fsRunc's
	// file, where podDir reads another: against fsRunc it shows what
	// Plinth's publication costs alone, against podDir what the two
	// files differ by.
	podVolFile = "floor-volfile-pod"
	// nodeImage and podImage: fio with O_DIRECT on the block volume's own
	// image file, on the node and in a runc pod (hostPath of the file).
	nodeImage = "floor-image-node"
	podImage  = "floor-image-pod"
	// blockRunc: fio in a pod on the block claim's device.
	blockRunc   = "block-runc"
	floorSubdir = "datapath-floor"
)

// runs are every round's figures, by target and workload.
type runs map[string]map[string][]fio.Measure

// bench is one run of the benchmark on a started cluster.
type bench struct {
	client kubernetes.Interface
	node   node
	timing timing
	// only, when set, is the targets the rounds run (-targets): a
	// subset of the node's, in the node's order.
	only []string
	// floorDir, image and volFile are the floors' paths on the node: the
	// plain directory (holding fileName), the block volume's image file
	// and the filesystem volume's fileName.
	floorDir, image, volFile string
	// fill says how long writing each target in full took.
	fill map[string]time.Duration
}

// measure sets the targets up and runs the rounds; it deletes the claims
// at the end, also after a failure.
func (b *bench) measure(ctx context.Context, rounds int) (all runs, err error) {
	dir, remove, err := b.node.makeFloorDir(ctx)
	if err != nil {
		return nil, err
	}
	defer remove()
	b.floorDir = dir
	defer func() { err = errors.Join(err, deleteClaims(context.WithoutCancel(ctx), b.client)) }()
	if err := createClaim(ctx, b.client, fsClaim, corev1.PersistentVolumeFilesystem, 2*fileSize); err != nil {
		return nil, err
	}
	if err := createClaim(ctx, b.client, blockClaim, corev1.PersistentVolumeBlock, fileSize); err != nil {
		return nil, err
	}
	b.fill = map[string]time.Duration{}
	for _, t := range b.node.filled() {
		start := time.Now()
		if _, err := b.run(ctx, t, "fill", func(target string) []string { return fio.FillArgs(target, fileSize) }); err != nil {
			return nil, fmt.Errorf("filling %s: %w", t, err)
		}
		b.fill[t] = time.Since(start)
		fmt.Printf("datapath: %s written in full in %s\n", t, b.fill[t].Round(100*time.Millisecond))
	}
	if b.image, err = blockImage(ctx, b.client, b.node); err != nil {
		return nil, err
	}
	fmt.Printf("datapath: the block volume's image is %s\n", b.image)
	if b.volFile, err = volumeFile(ctx, b.client, b.node); err != nil {
		return nil, err
	}
	fmt.Printf("datapath: the filesystem volume's file is %s\n", b.volFile)
	all = runs{}
	for r := 1; r <= rounds; r++ {
		for _, t := range roundOrder(b.targets(), r) {
			out, err := b.run(ctx, t, fmt.Sprintf("r%d", r), func(target string) []string { return roundArgs(target, fileSize, b.timing) })
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r, t, err)
			}
			got, err := fio.Parse(out, workloads)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r, t, err)
			}
			if all[t] == nil {
				all[t] = map[string][]fio.Measure{}
			}
			for _, w := range workloads {
				all[t][w.Name] = append(all[t][w.Name], got[w.Name])
			}
			rr, rw := got[workloads[1].Name], got[workloads[3].Name]
			fmt.Printf("datapath: round %d %-17s randread qd32 %6.0f IOPS p99 %4.0f µs, randwrite qd32 %6.0f IOPS p99 %4.0f µs\n",
				r, t, rr.IOPS, rr.P99*1e6, rw.IOPS, rw.P99*1e6)
		}
	}
	return all, nil
}

// targets are the targets each round runs, in order: the node's, or
// those of them in only.
func (b *bench) targets() []string {
	if len(b.only) == 0 {
		return b.node.targets()
	}
	var out []string
	for _, t := range b.node.targets() {
		if slices.Contains(b.only, t) {
			out = append(out, t)
		}
	}
	return out
}

// roundOrder is the order round r runs targets in: as given in odd
// rounds, reversed in even ones, so that over the rounds each target runs
// as often before a neighbour as after it, and a volume and its floor
// share what running first or last brings (a disk that settles after the
// fill, a page cache another pod warmed).
func roundOrder(targets []string, r int) []string {
	if r%2 == 1 {
		return targets
	}
	out := slices.Clone(targets)
	slices.Reverse(out)
	return out
}

// run runs fio with args(target's path) on target: on the node for a
// node floor, in a pod named after the target and step otherwise.
func (b *bench) run(ctx context.Context, target, step string, args func(string) []string) ([]byte, error) {
	switch target {
	case nodeDir:
		return b.node.runFio(ctx, args(filepath.Join(b.floorDir, fileName)))
	case nodeImage:
		return b.node.runFio(ctx, args(b.image))
	}
	p, err := b.pod(target, step)
	if err != nil {
		return nil, err
	}
	return runPod(ctx, b.client, p.spec(args(p.target())))
}

// pod is the fio pod of target at step: the in-pod floors and the volumes
// differ only in their volume, and gVisor's in its runtime.
func (b *bench) pod(target, step string) (podRun, error) {
	p := podRun{name: "fio-" + target + "-" + step, rt: launch.RuncRuntime()}
	switch target {
	case podDir:
		p.source = hostSource(b.floorDir, corev1.HostPathDirectory)
	case fsRunc:
		p.source = claimSource(fsClaim)
	case fsGVisor:
		p.source, p.rt = claimSource(fsClaim), launch.GVisorRuntime()
	case podVolFile:
		if b.volFile == "" {
			return podRun{}, fmt.Errorf("target %s before the filesystem volume's file was found", target)
		}
		p.source, p.file = hostSource(b.volFile, corev1.HostPathFile), true
	case podImage:
		if b.image == "" {
			return podRun{}, fmt.Errorf("target %s before the block volume's image was found", target)
		}
		p.source, p.file = hostSource(b.image, corev1.HostPathFile), true
	case blockRunc:
		p.source, p.block = claimSource(blockClaim), true
	default:
		return podRun{}, fmt.Errorf("target %s runs in no pod", target)
	}
	return p, nil
}
