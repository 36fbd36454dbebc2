// Command restart measures how long plinth-node takes to come back after
// it is killed on a node with many volumes (issue 40, item 3): N
// filesystem volumes, half of them published (bind-mounted at kubelet-like
// target paths), plinth-node killed with SIGKILL and started again, timed
// from the exec to
//
//   - ready: /readyz answers 200, every runnable of the supervision tree
//     running and healthy. The CSI plugin only listens once Start has
//     checked every publication record against the mounts (reconcile.go:
//     a bind mount of the volume's directory at the target, with the
//     recorded read-only state, re-made when missing), so ready includes
//     that check;
//   - all checked: NodeGetVolumeHealth answered, healthy, for every
//     published volume, as the volume-health watch asks on its first pass
//     (one call after another on the plugin's socket).
//
// plinth-node runs as `plinth-node csi-serve`: the node's root (data
// directory, the volume engine and its Recover, the CSI plugin, volume
// metrics) without the Kubernetes services, which need a control plane
// and check no publication at start. Volumes are made with the plugin's
// CreateVolume and published with its NodePublishVolume, so the state on
// disk is the one the plugin itself leaves.
//
//	go run ./bench/restart -out DIR [-sizes 1000,10000] [-runs N] [-quick]
//
// Every mount it made is unmounted at the end, also when it fails or is
// interrupted; it then checks that /proc/self/mountinfo shows none below its
// work directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/result"
)

type options struct {
	out   string
	sizes []int
	runs  int
	quick bool
}

func main() {
	var o options
	sizes := flag.String("sizes", "1000,10000", "volume counts N, comma-separated; half of each is published")
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.IntVar(&o.runs, "runs", 3, "kills and restarts measured at each N")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: N = 100 and 1,000, 1 run")
	flag.Parse()
	if o.quick {
		*sizes, o.runs = "100,1000", 1
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "restart: -sizes: %q is not a volume count of at least 2\n", s)
			os.Exit(2)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.out == "" {
		fmt.Fprintln(os.Stderr, "restart: -out is required")
		os.Exit(2)
	}
	// SIGINT and SIGTERM end the run through the deferred cleanup, so
	// that no mount outlives an interrupted benchmark.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "restart: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	// Setting up dominates: each CreateVolume sums what every volume
	// already there promises (volume.Manager's space check), so making
	// 10,000 volumes takes about 3.5 minutes here, 1,000 about 2 s.
	setUp := 0.0
	for _, n := range o.sizes {
		setUp += 2e-6 * float64(n) * float64(n)
	}
	fmt.Printf("restart: sizes %v, %d runs each; expected wall time about %s, most of it making the volumes\n",
		o.sizes, o.runs, (time.Duration(setUp)*time.Second + 30*time.Second).Round(time.Minute))
	tmp, done, err := cluster.WorkDir("restart", "restart-", o.out)
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	bin, err := cluster.BuildPlinthNode(ctx, tmp)
	if err != nil {
		return err
	}
	ready := result.Series{Name: "ready"}
	checked := result.Series{Name: "all-checked"}
	var perVolume, setUps []string
	for _, n := range o.sizes {
		r, err := measureSize(ctx, bin, tmp, n, o.runs)
		if err != nil {
			return fmt.Errorf("measuring %d volumes: %w", n, err)
		}
		ready.Points = append(ready.Points, result.Point{X: float64(n), Runs: r.ready})
		checked.Points = append(checked.Points, result.Point{X: float64(n), Runs: r.checked})
		setUps = append(setUps, "Set up (not part of the measurement): "+r.setUp)
		perVolume = append(perVolume, fmt.Sprintf("N=%d: ready %.0f µs, all checked %.0f µs per volume (medians / N)",
			n, result.Median(r.ready)*1e6/float64(n), result.Median(r.checked)*1e6/float64(n)))
	}
	notes := []string{
		"N filesystem volumes (1 MiB each, the host's filesystem without quota, --allow-unenforced-capacity) made with the plugin's CreateVolume; N/2 published with its NodePublishVolume at <kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount (bind mounts, read-write). plinth-node is `plinth-node csi-serve` with --metrics-address: the node's root (data directory, volume engine with Recover, CSI plugin, volume metrics) without the Kubernetes services.",
		"Each run sends SIGKILL to plinth-node's process group, waits for it to end, and execs it again with the same flags (same boot: the plugin verifies its publications rather than dropping them). ready: /readyz first answers 200 (polled every 5 ms); the CSI plugin listens only after checking every publication record, so ready includes that check. all checked: NodeGetVolumeHealth answered healthy for each published volume in turn, the volume-health watch's first pass.",
		"Page cache warm (a process restart, not a reboot). The machine (2 cores) was shared with other sessions building and testing; figures of one run are compared with each other.",
		ratioNote("ready", ready), ratioNote("all checked", checked),
	}
	notes = append(append(notes, perVolume...), setUps...)
	r := &result.Result{
		Name:   "restart",
		Title:  "plinth-node killed and restarted with N volumes, half published",
		X:      result.Axis{Label: "volumes (N)"},
		Y:      result.Axis{Label: "time from exec", Unit: "s"},
		Series: []result.Series{ready, checked},
		Goals:  []string{"Issue 40 item 3: linear in N (the time at 10,000 about 10 times the time at 1,000), and under 10 s at 10,000 volumes."},
		Notes:  notes,
	}
	return result.Write(o.out, r)
}

// ratioNote says how the median at the largest N compares with the one
// at the smallest, against the ratio of the N themselves (linear).
func ratioNote(what string, s result.Series) string {
	if len(s.Points) < 2 {
		return what + ": one N only, no ratio"
	}
	lo, hi := s.Points[0], s.Points[len(s.Points)-1]
	return fmt.Sprintf("%s: N=%.0f / N=%.0f = %.2f (linear: %.3g)", what, hi.X, lo.X,
		result.Median(hi.Runs)/result.Median(lo.Runs), hi.X/lo.X)
}

// measured is one N's runs, in seconds from exec.
type measured struct {
	ready, checked []float64
	// setUp says how long making the volumes and publications took.
	setUp string
}

// measureSize makes n volumes in a fresh tree under tmp, publishes half,
// and kills and restarts plinth-node runs times. Whatever happens, every
// publication is unpublished (or, failing that, unmounted) before it
// returns.
func measureSize(ctx context.Context, bin, tmp string, n, runs int) (m measured, err error) {
	nd, err := newNode(bin, tmp, n)
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, nd.cleanUp()) }()
	create, publish, err := nd.populate(ctx)
	if err != nil {
		return m, err
	}
	m.setUp = fmt.Sprintf("N=%d: %d CreateVolume in %s (%.0f µs each), %d NodePublishVolume in %s (%.0f µs each), %d at a time",
		n, n, create.Round(time.Millisecond), float64(create.Microseconds())/float64(n),
		n/2, publish.Round(time.Millisecond), float64(publish.Microseconds())/float64(n/2), setUpWorkers)
	fmt.Printf("restart: set up %s\n", m.setUp)
	for i := range runs {
		ready, checked, err := nd.killAndRestart(ctx)
		if err != nil {
			return m, fmt.Errorf("run %d: %w", i+1, err)
		}
		fmt.Printf("restart: N=%d run %d: ready %.3f s, all %d publications checked %.3f s\n", n, i+1, ready.Seconds(), n/2, checked.Seconds())
		m.ready = append(m.ready, ready.Seconds())
		m.checked = append(m.checked, checked.Seconds())
	}
	return m, nil
}
