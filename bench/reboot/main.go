// Command reboot measures how long a workload waits for its volume after
// its node reboots (issue 40, item 4): the VM node (test/nodevm: the node
// image in qemu under TCG, plinth-node as PID 1, joined to a control plane
// on this host) runs a probe pod (nodevm.ProbePod, the pod of the e2evm
// reboot test) that, each time its container starts, reads what it wrote
// to its volumes before and prints it. The node is rebooted cleanly
// (SysRq-e: every process but init gets SIGTERM, plinth-node stops its
// tree, init powers off) and by cutting its power (qemu killed), and each
// reboot is timed from the request to the probe's line, split into
//
//	shutdown    the request until qemu ended (0 for a power cut)
//	kernel      qemu started until the kernel started init
//	init        init until plinth-node's root was up: data partition
//	            mounted, volumes recovered, network up, services started
//	containerd  until containerd answered
//	kubelet     until the API server showed the Node Ready, new boot ID
//	plinth      until the kubelet had registered Plinth's plugin and
//	            Plinth had published the probe's volumes (with claims)
//	pod start   until the probe printed what it read
//
// beside the same node and the same probe without claims: its /data an
// emptyDir on the node's disk, no block devices, so the baseline is the
// same pod reading the same marker from a directory the kubelet alone
// provides. Where each time is read is timeline.go.
//
//	go run ./bench/reboot -out DIR [-runs N] [-quick]
//
// Needs root (the VM node's IP goes on this host's lo) and
// PLINTH_K8S_BIN and PLINTH_SNAPSHOT_BIN (bench.sh exports both); builds
// the node image's test variant (build/scripts/nodeimage-test.sh) itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/test/nodevm"
)

type options struct {
	out   string
	runs  int
	quick bool
	// timeout bounds one reboot to the probe's first byte: a guest that
	// hangs (a soft lockup) fails the run instead of stalling it.
	timeout time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.IntVar(&o.runs, "runs", 5, "reboots of each kind (clean, power cut) with and without claims")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: one reboot of each kind with claims and without")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "longest wait for one reboot to the probe's line")
	flag.Parse()
	if o.out == "" {
		fmt.Fprintln(os.Stderr, "reboot: -out is required")
		os.Exit(2)
	}
	if o.quick {
		o.runs = 1
	}
	// SIGINT and SIGTERM end the run through the deferred cleanup, so
	// that no qemu or control plane outlives an interrupted benchmark.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "reboot: %v\n", err)
		os.Exit(1)
	}
}

// kinds are the reboots measured, in turn: clean, then a power cut. The
// clean reboot comes first also after the first boot: a power cut seconds
// after the first boot imported the node's images lost their unpacked
// files, and no pod started again (see docs/benchmarks.md).
var kinds = []bool{true, false}

func kindName(clean bool) string {
	if clean {
		return "clean"
	}
	return "cut"
}

func run(ctx context.Context, o options) (err error) {
	reboots := 2 * o.runs * len(kinds)
	fmt.Printf("reboot: %d reboots (%d of each kind with and without claims); expected wall time about %s\n",
		reboots, o.runs, (time.Duration(reboots+4) * 40 * time.Second).Round(time.Minute))
	tmp, done, err := cluster.WorkDir("reboot", "reboot-", o.out)
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	image, kernel, err := nodevm.TestImage(ctx)
	if err != nil {
		return err
	}
	w, err := startWorld(ctx, tmp, image, kernel, o.timeout)
	if w != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Minute)
			defer cancel()
			err = errors.Join(err, w.close(cctx))
		}()
	}
	if err != nil {
		return err
	}
	ms := map[string][]measured{}
	// hangs are the reboots that did not reach the probe's line while
	// the guest kernel reported itself stuck.
	var hangs []string
	for _, claims := range []bool{false, true} {
		p, err := startProbe(ctx, w, claims)
		if err != nil {
			return err
		}
		for i := range o.runs {
			for _, clean := range kinds {
				what := fmt.Sprintf("%s reboot %d, %s (boot %d)", kindName(clean), i+1, configName(claims), w.boots+1)
				m, err := w.reboot(ctx, clean, p)
				var hang *hangError
				if errors.As(err, &hang) {
					// Recorded, and the run goes on: the results
					// of the other reboots are still written, and
					// the run fails at the end.
					fmt.Fprintf(os.Stderr, "reboot: %s hung: %v\n", what, err)
					hangs = append(hangs, what)
					if err := w.recoverNode(ctx, p); err != nil {
						return fmt.Errorf("recovering the node after %s hung: %w", what, err)
					}
					continue
				}
				if err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				s := m.split(claims)
				fmt.Printf("reboot: %s %d, %s: %s\n", kindName(clean), i+1, configName(claims), describe(s))
				ms[kindName(clean)] = append(ms[kindName(clean)], measured{claims: claims, m: m, split: s})
			}
		}
		if err := p.stop(ctx, w); err != nil {
			return err
		}
	}
	for _, clean := range kinds {
		if err := writeResult(o.out, kindName(clean), ms[kindName(clean)], hangs); err != nil {
			return err
		}
	}
	if len(hangs) > 0 {
		return fmt.Errorf("%d reboots hung, the guest kernel reporting lockups (not in the results; consoles in %s): %s",
			len(hangs), tmp, strings.Join(hangs, "; "))
	}
	return nil
}
