// Command footprint measures plinth-node's resident memory and idle CPU
// beside rancher's local-path-provisioner v0.0.30 under the same load
// (issue 14, item 4): an empty cluster, each with its 500 volumes, and
// 10,000 foreign claims on top (claims of other nodes and of other
// classes, which every node's provisioner sees). Both run as processes
// against one bare control plane (no kubelet), measured side by side:
// RSS once it settles after a fresh start with the load present, CPU
// over an idle window after that.
//
//	go run ./bench/footprint -out DIR [-runs N] [-quick]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/localpath"
	"source.plinth.dev/bench/procstat"
	"source.plinth.dev/bench/result"
	"source.plinth.dev/test/launch"
)

type options struct {
	out       string
	runs      int
	quick     bool
	volumes   int
	foreign   int
	idle      time.Duration
	localPath string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.IntVar(&o.runs, "runs", 3, "fresh starts measured at each load")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 50 volumes, 500 foreign claims, 1 run, 10 s idle window")
	flag.IntVar(&o.volumes, "volumes", 500, "volumes of each provisioner")
	flag.IntVar(&o.foreign, "foreign", 10000, "foreign claims of the last load")
	flag.DurationVar(&o.idle, "idle", 45*time.Second, "idle window over which CPU is measured")
	flag.StringVar(&o.localPath, "local-path", "", "local-path-provisioner binary (default: third_party/localpath/build.sh)")
	flag.Parse()
	if o.quick {
		o.volumes, o.foreign, o.runs, o.idle = 50, 500, 1, 10*time.Second
	}
	if o.out == "" {
		fmt.Fprintln(os.Stderr, "footprint: -out is required")
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintf(os.Stderr, "footprint: %v\n", err)
		os.Exit(1)
	}
}

// sample is one fresh start's figures of one process.
type sample struct{ rssMiB, cpuPercent float64 }

// world is the running benchmark: its control plane, binaries and the
// directory each process keeps its state in.
type world struct {
	o         options
	cp        *cluster.ControlPlane
	fast      kubernetes.Interface
	plinthBin string
	lpBin     string
	tmp       string
	node      string
}

func run(ctx context.Context, o options) (err error) {
	// Setup ~2 min; each measurement is a start, settling (~15 s) and the
	// idle window, for both at once, at 3 loads.
	per := 20*time.Second + o.idle
	fmt.Printf("footprint: expected wall time about %s (%d runs x 3 loads x %s, plus setup)\n",
		(time.Duration(3*o.runs)*per + 2*time.Minute).Round(time.Minute), o.runs, per)
	tmp, done, err := cluster.WorkDir("footprint", "fp-", o.out)
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	w := &world{o: o, tmp: tmp, node: "fp-node"}
	if w.plinthBin, err = cluster.BuildPlinthNode(ctx, tmp); err != nil {
		return err
	}
	repo, err := launch.RepoRoot(".")
	if err != nil {
		return err
	}
	if w.lpBin, err = localpath.Binary(ctx, repo, o.localPath); err != nil {
		return err
	}
	if w.cp, err = cluster.Start(ctx, filepath.Join(tmp, "cp")); err != nil {
		return err
	}
	defer func() { _ = w.cp.Stop(context.Background()) }()
	if w.fast, err = w.cp.Client(3000, 3000); err != nil {
		return err
	}
	if err := w.setUp(ctx); err != nil {
		return err
	}

	own := 2 * o.volumes
	loads := []struct {
		claims int
		add    func(context.Context) error
	}{
		{0, nil},
		{own, w.addVolumes},
		{own + o.foreign, w.addForeign},
	}
	series := map[string][]result.Point{}
	cpu := map[string][]result.Point{}
	for _, l := range loads {
		if l.add != nil {
			if err := l.add(ctx); err != nil {
				return err
			}
		}
		var rss, pct = map[string][]float64{}, map[string][]float64{}
		for r := range o.runs {
			s, err := w.measure(ctx)
			if err != nil {
				return err
			}
			for name, v := range s {
				rss[name] = append(rss[name], v.rssMiB)
				pct[name] = append(pct[name], v.cpuPercent)
				fmt.Printf("footprint: claims=%d run %d %-11s rss %.1f MiB cpu %.2f%%\n", l.claims, r+1, name, v.rssMiB, v.cpuPercent)
			}
		}
		for name := range rss {
			series[name] = append(series[name], result.Point{X: float64(l.claims), Runs: rss[name]})
			cpu[name] = append(cpu[name], result.Point{X: float64(l.claims), Runs: pct[name]})
		}
	}
	notes := []string{
		fmt.Sprintf("One bare control plane (etcd, kube-apiserver, kube-controller-manager; no kubelet; the node registered as its kubelet would, a Node object and a CSINode listing Plinth's driver). x is the number of claims in the cluster: 0; %d (each provisioner's own %d, Bound, with volumes; each sees the other's as foreign); %d (plus %d foreign claims, half of Plinth's class for 100 other nodes, half of a third class, with two labels each).", own, o.volumes, own+o.foreign, o.foreign),
		"plinth-node runs as in the controllers' process tests (its own node name, data directory on the host filesystem, node identity); local-path-provisioner v0.0.30 (third_party/localpath/build.sh) runs on the host with the admin kubeconfig and its deploy/ ConfigMap.",
		"plinth-node provisions its volumes for real (directories in its data directory, PVs, bound by the PV controller). local-path provisions through helper pods, which no kubelet runs here, so its volumes are made as it makes them (hostPath PV with its provisioned-by annotation and node affinity, bound to the claim): idle, it holds nothing of a volume but these objects in its informers.",
		fmt.Sprintf("Each run starts both processes afresh with the load present, reads each one's RSS once %s, then reads utime+stime of /proc/PID/stat over a %s idle window; CPU is %% of one core.", procstat.SettleRule(), o.idle),
	}
	goals := []string{"Issue 14 item 4 sets no number: plinth-node's footprint beside local-path-provisioner's under the same load. BenchmarkForeignClaimsRSS's goal applies: < 2 KiB of plinth-node RSS per foreign claim."}
	results := []*result.Result{
		{Name: "footprint-rss", Title: "Idle resident memory, plinth-node vs local-path-provisioner",
			X: result.Axis{Label: "claims in the cluster"}, Y: result.Axis{Label: "RSS", Unit: "MiB"},
			Baseline: "local-path", Series: toSeries(series), Goals: goals, Notes: notes},
		{Name: "footprint-cpu", Title: "Idle CPU, plinth-node vs local-path-provisioner",
			X: result.Axis{Label: "claims in the cluster"}, Y: result.Axis{Label: "CPU", Unit: "% of a core"},
			Baseline: "local-path", Series: toSeries(cpu), Goals: goals[:1], Notes: notes},
	}
	if per := perForeign(series, o.foreign); per != "" {
		results[0].Notes = append(results[0].Notes, per)
	}
	for _, r := range results {
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	return nil
}

// toSeries orders the series: plinth-node first.
func toSeries(m map[string][]result.Point) []result.Series {
	var out []result.Series
	for _, name := range []string{"plinth-node", "local-path"} {
		out = append(out, result.Series{Name: name, Points: m[name]})
	}
	return out
}

// perForeign says how much each process grew per foreign claim between
// the last two loads, by medians.
func perForeign(m map[string][]result.Point, foreign int) string {
	s := "RSS growth per foreign claim (median of the last load minus the one before, / foreign claims):"
	for _, name := range []string{"plinth-node", "local-path"} {
		p := m[name]
		if len(p) < 2 {
			return ""
		}
		d := result.Median(p[len(p)-1].Runs) - result.Median(p[len(p)-2].Runs)
		s += fmt.Sprintf(" %s %.0f B;", name, d*(1<<20)/float64(foreign))
	}
	return s
}

func (w *world) setUp(ctx context.Context) error {
	for _, ns := range []string{"own", "foreign"} {
		if err := cluster.CreateNamespace(ctx, w.fast, ns); err != nil {
			return err
		}
	}
	if err := cluster.CreateClass(ctx, w.fast, cluster.PlinthClass, cluster.PlinthDriver); err != nil {
		return err
	}
	if err := cluster.CreateClass(ctx, w.fast, "other", "example.com/other"); err != nil {
		return err
	}
	if err := cluster.RegisterNode(ctx, w.fast, w.node); err != nil {
		return err
	}
	return localpath.Install(ctx, w.fast, localPathDir)
}

// addVolumes gives each provisioner its volumes: plinth-node provisions
// its own (a plinth-node runs until they are Bound), local-path's are
// made as it would make them.
func (w *world) addVolumes(ctx context.Context) error {
	n := w.o.volumes
	start := time.Now()
	node, err := w.startPlinth()
	if err != nil {
		return err
	}
	defer node.Stop()
	if err := cluster.Parallel(n, 16, func(i int) error {
		_, err := w.fast.CoreV1().PersistentVolumeClaims("own").Create(ctx,
			cluster.Claim("own", fmt.Sprintf("c%05d", i), cluster.PlinthClass, cluster.PlinthDriver, w.node), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		claim, pv := localPathVolume(localpath.Namespace, i, w.node)
		if _, err := w.fast.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err = w.fast.CoreV1().PersistentVolumeClaims(localpath.Namespace).Create(ctx, claim, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating volumes: %w", err)
	}
	for _, ns := range []string{"own", localpath.Namespace} {
		if err := cluster.WaitBound(ctx, w.fast, ns, n, 10*time.Minute); err != nil {
			return err
		}
	}
	if node.Exited() {
		return errors.New("plinth-node exited while provisioning (log in " + w.tmp + ")")
	}
	fmt.Printf("footprint: %d volumes each, Bound in %s\n", n, time.Since(start).Round(time.Second))
	return nil
}

// addForeign creates the foreign claims: half of Plinth's class selected
// for 100 other nodes, half of a class neither provisions.
func (w *world) addForeign(ctx context.Context) error {
	start := time.Now()
	err := cluster.Parallel(w.o.foreign, 32, func(i int) error {
		c := cluster.Claim("foreign", fmt.Sprintf("f%05d", i), cluster.PlinthClass, cluster.PlinthDriver, fmt.Sprintf("other-node-%02d", i%100))
		if i%2 == 1 {
			c = cluster.Claim("foreign", fmt.Sprintf("f%05d", i), "other", "example.com/other", fmt.Sprintf("other-node-%02d", i%100))
		}
		c.Labels = map[string]string{"app": "database", "tier": "backend"}
		_, err := w.fast.CoreV1().PersistentVolumeClaims("foreign").Create(ctx, c, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating foreign claims: %w", err)
	}
	fmt.Printf("footprint: %d foreign claims created in %s\n", w.o.foreign, time.Since(start).Round(time.Second))
	return nil
}

func (w *world) startPlinth() (*cluster.Process, error) {
	args, err := cluster.PlinthNodeArgs(w.cp, w.node, filepath.Join(w.tmp, "node"))
	if err != nil {
		return nil, err
	}
	return cluster.StartProcess("plinth-node", w.plinthBin, args, nil, filepath.Join(w.tmp, "plinth-node.log"))
}

// measure starts both provisioners afresh, waits until they settle and
// measures them over the idle window.
func (w *world) measure(ctx context.Context) (map[string]sample, error) {
	node, err := w.startPlinth()
	if err != nil {
		return nil, err
	}
	defer node.Stop()
	lp, err := cluster.StartProcess("local-path", w.lpBin, localpath.Args(w.cp.Kubeconfig), nil, filepath.Join(w.tmp, "local-path.log"))
	if err != nil {
		return nil, err
	}
	defer lp.Stop()
	procs := []*cluster.Process{node, lp}
	// Both list everything at start; the first seconds are that work.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(8 * time.Second):
	}
	out := map[string]sample{}
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.Pid())
	}
	rss, err := procstat.SettledAll(pids, procstat.SettleInterval, procstat.SettleTolerance, procstat.SettleQuiet, procstat.SettleTries)
	if err != nil {
		return nil, err
	}
	for i, p := range procs {
		out[p.Name] = sample{rssMiB: float64(rss[i]) / (1 << 20)}
	}
	var samplers []*procstat.Sampler
	for _, p := range procs {
		s, err := procstat.StartSampler(p.Pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		samplers = append(samplers, s)
	}
	time.Sleep(w.o.idle)
	for i, p := range procs {
		if p.Exited() {
			return nil, fmt.Errorf("%s exited during the measurement (logs in %s)", p.Name, w.tmp)
		}
		pct, err := samplers[i].Percent()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		s := out[p.Name]
		s.cpuPercent = pct
		out[p.Name] = s
	}
	return out, nil
}
