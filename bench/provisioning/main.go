// Command provisioning measures dynamic provisioning on the local cluster
// of test/launch (issue 14, item 1): N claims of 1 MiB
// (WaitForFirstConsumer), each used by one pod that writes a file, timed
// from the first create to every pod Running, for Plinth (StorageClass
// local), rancher's local-path-provisioner v0.0.30 (the peer most
// single-node clusters ship) and the same pods with an emptyDir (the floor:
// pod start alone, no storage). It also times deletion (pods and claims
// deleted) until every PV is gone.
//
// One cluster serves every series and run; the runs of the three series
// are interleaved, so drift of the machine hits them alike. Results go to
// -out as bench/result files: provisioning-running (baseline emptydir) and
// provisioning-deletion (baseline local-path).
//
//	go run ./bench/provisioning -out DIR [-runs 5] [-quick]
//
// It needs root (the cluster) and prints its expected wall time first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/bench/localpath"
	"source.plinth.dev/bench/result"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/launch"
)

// argList collects a repeatable flag.
type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }

var allSeries = []series{
	{name: "emptydir", letter: "e"},
	{name: "plinth", class: names.StorageClassName, letter: "p"},
	{name: "local-path", class: localpath.Class, letter: "l"},
}

type options struct {
	out, dir, plinthNode, localPath string
	runs, runs200, runsLocalPath    int
	ns                              []int
	series                          []series
	kcmArgs, nodeArgs, kubeletArgs  []string
	audit                           bool
	timeout                         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.StringVar(&o.dir, "dir", "/tmp/plinth-bench-prov", "the cluster's work directory (wiped)")
	flag.StringVar(&o.plinthNode, "plinth-node", os.Getenv("PLINTH_NODE_BIN"), "plinth-node binary (default: go build it)")
	flag.StringVar(&o.localPath, "local-path", "", "local-path-provisioner binary (default: third_party/localpath/build.sh)")
	flag.IntVar(&o.runs, "runs", 5, "runs per point for N <= 100")
	flag.IntVar(&o.runs200, "runs-200", 3, "runs per point for N > 100")
	flag.IntVar(&o.runsLocalPath, "runs-local-path", 3, "runs per point of local-path for N <= 100, whose runs take minutes; above N = 100 it has one run (about 10 min at N = 200)")
	quick := flag.Bool("quick", false, "N=10, one run: a smoke test of a few minutes")
	nList := flag.String("n", "50,100,200", "claims per run, comma-separated")
	only := flag.String("series", "emptydir,plinth,local-path", "series to measure, comma-separated")
	var kcm, node, kubelet argList
	flag.Var(&kcm, "kcm-arg", "EXPERIMENT ONLY: extra kube-controller-manager flag (repeatable); the results say so")
	flag.Var(&node, "plinth-node-arg", "EXPERIMENT ONLY: extra plinth-node flag (repeatable); the results say so")
	flag.Var(&kubelet, "kubelet-arg", "EXPERIMENT ONLY: extra kubelet flag (repeatable), e.g. --kube-api-qps=200; the results say so")
	flag.BoolVar(&o.audit, "audit", false, "EXPERIMENT ONLY: the API server keeps an audit log, and each run counts the API calls each component made until all pods ran (costs the API server a log line per request); the results say so")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "longest wait for one stage of one run")
	flag.Parse()
	o.kcmArgs, o.nodeArgs, o.kubeletArgs = kcm, node, kubelet
	if o.out == "" {
		fatal(fmt.Errorf("-out is required"))
	}
	for _, f := range strings.Split(*nList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fatal(fmt.Errorf("-n: bad count %q", f))
		}
		o.ns = append(o.ns, n)
	}
	for _, name := range strings.Split(*only, ",") {
		i := slices.IndexFunc(allSeries, func(s series) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			fatal(fmt.Errorf("-series: unknown series %q", name))
		}
		o.series = append(o.series, allSeries[i])
	}
	if *quick {
		o.ns, o.runs, o.runs200, o.runsLocalPath = []int{10}, 1, 1, 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "provisioning: %v\n", err)
	os.Exit(1)
}

// runsAt is the number of runs of series s at N = n. A run that takes
// seconds gets the default 5; local-path's take minutes (about 2.5 at
// N = 50, 10 at N = 200), so fewer keep make bench within its budget.
func (o options) runsAt(s series, n int) int {
	switch {
	case s.name == "local-path" && n > 100:
		return min(1, o.runsLocalPath)
	case s.name == "local-path":
		return o.runsLocalPath
	case n > 100:
		return o.runs200
	}
	return o.runs
}

// expected is the wall time a run of o should take on the 2-core machine
// this was developed on: rates measured there (pods per second to Running
// and to gone, per series), plus the cluster's start and stop.
func (o options) expected() time.Duration {
	// Running + deletion, seconds per pod: emptyDir and Plinth about 4
	// pods a second each way; local-path about 1.5 s per claim each way
	// (its client's 5 QPS and a helper pod per volume).
	perPod := map[string]float64{"emptydir": 0.25 + 0.2, "plinth": 0.35 + 0.3, "local-path": 1.5 + 1.4}
	total := 90.0 // cluster start, builds when cached, teardown
	for _, n := range o.ns {
		for _, s := range o.series {
			total += float64(o.runsAt(s, n)) * (5 + float64(n)*perPod[s.name])
		}
	}
	return time.Duration(total) * time.Second
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	runs := o.runSummary()
	if runs == "" {
		runs = fmt.Sprint(o.runs, " everywhere")
	}
	fmt.Fprintf(os.Stderr, "provisioning: N=%v, series %s, runs per point: %s; expected wall time about %s\n",
		o.ns, seriesNames(o.series), runs, o.expected().Round(time.Minute))
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	root, err := launch.RepoRoot(".")
	if err != nil {
		return err
	}
	if o.plinthNode == "" {
		if o.plinthNode, err = buildPlinthNode(ctx, root, o.dir+"-bin"); err != nil {
			return err
		}
	}
	if o.localPath == "" && slices.ContainsFunc(o.series, func(s series) bool { return s.name == "local-path" }) {
		if o.localPath, err = localpath.Binary(ctx, root, ""); err != nil {
			return err
		}
	}

	cfg := launch.Config{
		Dir:         o.dir,
		WaitForLock: true,
		// Above the 200 pods of the largest N, local-path's helper pods
		// and the kubelet's default of 110.
		MaxPods:               250,
		ControllerManagerArgs: o.kcmArgs,
		KubeletArgs:           o.kubeletArgs,
		PlinthNode: &launch.PlinthNode{Binary: o.plinthNode, Args: func(p launch.Paths) []string {
			return append(launch.PlinthNodeArgs(p), o.nodeArgs...)
		}},
		Log: os.Stderr,
	}
	if o.audit {
		cfg.AuditGroups = auditedGroups
	}
	c, err := launch.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			fmt.Fprintf(os.Stderr, "provisioning: stopping the cluster: %v\n", err)
		}
	}()

	var lp *localPath
	if o.localPath != "" {
		if lp, err = startLocalPath(ctx, c, o.localPath); err != nil {
			return err
		}
		defer func() {
			if err := lp.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "provisioning: %v\n", err)
			}
		}()
	}
	fail := func() error {
		select {
		case <-c.Failed():
			return c.Err()
		default:
		}
		if lp != nil {
			return lp.failed()
		}
		return nil
	}

	// The benchmark's own client must not be what limits it: it issues
	// 2N creates at once.
	rc := rest.CopyConfig(c.RESTConfig)
	rc.QPS, rc.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := prepare(ctx, cs, c, o); err != nil {
		return err
	}
	var w watcher
	if err := w.start(ctx, cs); err != nil {
		return err
	}

	b := &bench{c: c, cs: cs, w: &w, timeout: o.timeout, fail: fail, audit: o.audit}
	rec := newRecorder(o.series)
	id := 0
	for _, n := range o.ns {
		most := 0
		for _, s := range o.series {
			most = max(most, o.runsAt(s, n))
		}
		for r := range most {
			for _, s := range o.series {
				if r >= o.runsAt(s, n) {
					continue
				}
				id++
				m, err := measure(ctx, b, s, n, id)
				if err != nil {
					return err
				}
				rec.add(s.name, n, m)
				fmt.Fprintf(os.Stderr, "provisioning: %-10s N=%-3d run %d: Running %.1fs, deletion %.1fs; %s; Events until Running: %s; kubelet until Running: %s; CPU until Running: %s\n",
					s.name, n, r+1, m.running.Seconds(), m.deletion.Seconds(), m.trace.summary(s.stages()), m.events, m.kubelet, m.cpu)
				if o.audit {
					fmt.Fprintf(os.Stderr, "provisioning: %-10s N=%-3d run %d: API calls until Running, by component: %s\n", s.name, n, r+1, m.calls)
				}
			}
		}
	}
	res := rec.results(o)
	for _, r := range res {
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	printTable(res)
	fmt.Fprintf(os.Stderr, "provisioning: done in %s (expected %s); results in %s\n",
		time.Since(start).Round(time.Second), o.expected().Round(time.Minute), o.out)
	return nil
}

// prepare creates the benchmark's namespace and waits for its default
// service account and for plinth-node's CSI driver on the node (the
// StorageClass exists from the launch on; provisioning needs the driver).
func prepare(ctx context.Context, cs kubernetes.Interface, c *launch.Cluster, o options) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, saErr := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		csi, csiErr := cs.StorageV1().CSINodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		registered := csiErr == nil && slices.ContainsFunc(csi.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == names.DriverName })
		if saErr == nil && registered {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready for the benchmark: service account: %v; CSI driver %s registered: %v (%v)", saErr, names.DriverName, registered, csiErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// buildPlinthNode builds plinth-node into dir.
func buildPlinthNode(ctx context.Context, root, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "plinth-node")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./node/cmd/plinth-node")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building plinth-node: %w", err)
	}
	return bin, nil
}

func seriesNames(ss []series) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}
