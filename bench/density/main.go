// Command density measures how long a pod with one block volume takes to
// start on a node that already serves D block volumes, with Plinth's
// patched kubelet and with the unpatched kubelet of the same version
// (issue 14, item 2), and writes the figures as result.Results for
// `make bench`.
//
// The unpatched kubelet "locks" every block volume it maps by binding a
// second loop device over the device file (it runs losetup, which scans
// every loop device on the host), so its work per new volume may grow with
// the volumes already there; the patched kubelet does none of it and
// should stay flat. Both clusters are test/launch's with plinth-node; only
// the kubelet binary differs.
//
// For each kubelet, one cluster: the background grows 0 → 50 → 100 → 200
// block volumes (pods each with one claim of the default StorageClass, all
// Running), and at each level K new pods are started one at a time, each
// timed from its creation to Running. New pods stay and count towards the
// next level's background, so the k-th new pod at level D sees D+k-1
// volumes. Loop devices are counted through pkg/loop at each level.
//
//	go run ./bench/density -out DIR [-runs K] [-quick]
//
// Needs root (test/launch) and runs one cluster at a time on the host.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"source.plinth.dev/bench/result"
	"source.plinth.dev/test/launch"
)

// options are the command line.
type options struct {
	out             string
	dir             string
	runs            int
	quick           bool
	plinthNode      string
	upstreamKubelet string
	kubelets        string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "results directory (required): block-density*.json are written there")
	flag.StringVar(&o.dir, "dir", "/tmp/plinth-density", "the clusters' work directory (wiped at start)")
	flag.IntVar(&o.runs, "runs", 5, "new pods timed at each density (K)")
	flag.BoolVar(&o.quick, "quick", false, "a smoke run: densities 0 and 10, 2 new pods each")
	flag.StringVar(&o.plinthNode, "plinth-node", os.Getenv("PLINTH_NODE_BIN"), "plinth-node binary (default: $PLINTH_NODE_BIN, else go build)")
	flag.StringVar(&o.upstreamKubelet, "upstream-kubelet", os.Getenv("PLINTH_UPSTREAM_KUBELET"),
		"unpatched kubelet binary (default: $PLINTH_UPSTREAM_KUBELET, else third_party/kubernetes/upstream-kubelet.sh)")
	flag.StringVar(&o.kubelets, "kubelets", "patched,upstream", "which kubelets to measure, comma-separated")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "density: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.out == "" {
		return errors.New("-out is required")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("creating the results directory: %w", err)
	}
	p := plan{densities: []int{0, 50, 100, 200}, perLevel: o.runs}
	if o.quick {
		p = plan{densities: []int{0, 10}, perLevel: 2}
	}
	if p.perLevel < 1 {
		return fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	kubelets := strings.Split(o.kubelets, ",")
	for _, k := range kubelets {
		if k != seriesPatched && k != seriesUpstream {
			return fmt.Errorf("-kubelets: unknown kubelet %q (want %s or %s)", k, seriesPatched, seriesUpstream)
		}
	}
	fmt.Fprintf(os.Stderr, "density: densities %v, %d new pods at each, kubelets %v: expected wall time about %s\n",
		p.densities, p.perLevel, kubelets, p.expected(len(kubelets)).Round(time.Minute))

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	root, err := launch.RepoRoot(".")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "plinth-density-bin")
	if err != nil {
		return fmt.Errorf("creating a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if o.plinthNode == "" {
		if o.plinthNode, err = buildPlinthNode(ctx, root, tmp); err != nil {
			return err
		}
	}
	for _, k := range kubelets {
		if k == seriesUpstream && o.upstreamKubelet == "" {
			if o.upstreamKubelet, err = upstreamKubelet(ctx, root); err != nil {
				return err
			}
		}
	}

	started := time.Now()
	var all []kubeletRun
	for _, k := range kubelets {
		cfg := launch.Config{
			Dir:         o.dir,
			PlinthNode:  &launch.PlinthNode{Binary: o.plinthNode},
			MaxPods:     p.maxPods(),
			WaitForLock: true,
			Log:         os.Stderr,
		}
		if k == seriesUpstream {
			cfg.UpstreamKubelet = o.upstreamKubelet
		}
		r, err := measureKubelet(ctx, k, cfg, p)
		if err != nil {
			return fmt.Errorf("%s kubelet: %w", k, err)
		}
		all = append(all, r)
	}
	results := buildResults(all, p)
	for _, r := range results {
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(os.Stderr, "density: %s: %s\n", r.Name, n)
		}
	}
	fmt.Fprintf(os.Stderr, "density: done in %s; results in %s\n", time.Since(started).Round(time.Second), o.out)
	return nil
}

// buildPlinthNode builds plinth-node into dir.
func buildPlinthNode(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "plinth-node")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./node/cmd/plinth-node")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building plinth-node: %w", err)
	}
	return bin, nil
}

// upstreamKubelet builds (or finds cached) the unpatched kubelet.
func upstreamKubelet(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "third_party", "kubernetes", "upstream-kubelet.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the upstream kubelet: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "kubelet"), nil
}

// logf prints a progress line.
func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "density: "+format+"\n", args...)
}
