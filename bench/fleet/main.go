// Command fleet simulates many nodes on one control plane (issues 14 and
// 35): 10, 50, 100 and 200 plinth-node processes, each with its own node
// name and data directory, against one bare control plane holding 10,000
// claims spread over the largest fleet's node names, all provisioned and
// Bound first by the whole fleet running at once. Each node watches only
// the claims labelled for it (storage.plinth.dev/node, written by the
// admission server), so a claim change should reach one node whatever
// the fleet's size: at each fleet size it measures kube-apiserver's CPU
// per claim change and its RSS, the watch bytes and events sent per claim
// change (the API server's own metrics), and each instance's RSS. Then,
// with the instances gone, the same changes against as many plain watches
// of all claims (what every node did before claims carried their node
// label), and against as many watches that select a node's claims by
// label (the floor the instances should match), so the notes can say
// which part grows with nodes.
//
//	go run ./bench/fleet -out DIR [-runs N] [-quick]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/procstat"
	"source.plinth.dev/bench/result"
)

const namespace = "fleet"

type options struct {
	out     string
	runs    int
	quick   bool
	nodes   []int
	claims  int
	changes int
}

func (o options) maxNodes() int { return slices.Max(o.nodes) }

func main() {
	var o options
	var nodes string
	flag.StringVar(&o.out, "out", "", "results directory (required)")
	flag.IntVar(&o.runs, "runs", 3, "rounds of claim changes measured at each fleet size")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 2 and 4 instances, 200 claims, 100 changes, 1 run")
	flag.StringVar(&nodes, "instances", "10,50,100,200", "fleet sizes, comma separated")
	flag.IntVar(&o.claims, "claims", 10000, "claims, spread over the largest fleet's nodes")
	flag.IntVar(&o.changes, "changes", 1000, "claim changes per round")
	flag.Parse()
	for _, s := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "fleet: bad -instances %q\n", nodes)
			os.Exit(2)
		}
		o.nodes = append(o.nodes, n)
	}
	if o.quick {
		o.nodes, o.claims, o.changes, o.runs = []int{2, 4}, 200, 100, 1
	}
	slices.Sort(o.nodes)
	if o.out == "" || o.claims%o.maxNodes() != 0 {
		fmt.Fprintln(os.Stderr, "fleet: -out is required, and -claims must be a multiple of the largest fleet")
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
		os.Exit(1)
	}
}

type world struct {
	o       options
	cp      *cluster.ControlPlane
	fast    kubernetes.Interface
	churner kubernetes.Interface
	tmp     string
	round   int
	// provisioned is how long the whole fleet took to provision every
	// claim.
	provisioned time.Duration
}

// series collects one Result's points by series name.
type series map[string][]result.Point

func (s series) add(name string, x float64, runs ...float64) {
	s[name] = append(s[name], result.Point{X: x, Runs: runs})
}

func (s series) list(names ...string) []result.Series {
	var out []result.Series
	for _, n := range names {
		if len(s[n]) > 0 {
			out = append(out, result.Series{Name: n, Points: s[n]})
		}
	}
	return out
}

const (
	seriesPlinth   = "plinth-node"
	seriesAll      = "watch all claims"
	seriesSelected = "watch own claims by label"
)

func run(ctx context.Context, o options) (err error) {
	maxN := o.maxNodes()
	fmt.Printf("fleet: expected wall time about %s (provisioning %d claims, %d fleet sizes x %d rounds of %d changes, then the watch comparison)\n",
		(3*time.Minute + time.Duration(o.claims)*15*time.Millisecond + time.Duration(len(o.nodes)*o.runs*3)*(30*time.Second+time.Duration(o.changes)*10*time.Millisecond)).Round(time.Minute),
		o.claims, len(o.nodes), o.runs, o.changes)
	tmp, done, err := cluster.WorkDir("fleet", "fl-", o.out)
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	w := &world{o: o, tmp: tmp}
	bin, err := cluster.BuildPlinthNode(ctx, tmp)
	if err != nil {
		return err
	}
	if w.cp, err = cluster.Start(ctx, filepath.Join(tmp, "cp")); err != nil {
		return err
	}
	defer func() { _ = w.cp.Stop(context.Background()) }()
	if w.fast, err = w.cp.Client(3000, 3000); err != nil {
		return err
	}
	// Changes come at a steady 200 per second, as a busy cluster's would.
	if w.churner, err = w.cp.Client(200, 20); err != nil {
		return err
	}
	if err := cluster.CreateNamespace(ctx, w.fast, namespace); err != nil {
		return err
	}
	if err := cluster.CreateClass(ctx, w.fast, cluster.PlinthClass, cluster.PlinthDriver); err != nil {
		return err
	}
	start := time.Now()
	if err := cluster.Parallel(o.claims, 32, func(i int) error {
		node := nodeName(i % maxN)
		c := cluster.Claim(namespace, fmt.Sprintf("c%05d", i), cluster.PlinthClass, cluster.PlinthDriver, node)
		c.Labels = map[string]string{labelSelectedNode: node}
		_, err := w.fast.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, c, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating claims: %w", err)
	}
	fmt.Printf("fleet: %d claims created in %s\n", o.claims, time.Since(start).Round(time.Second))
	if err := cluster.Parallel(maxN, 16, func(i int) error { return cluster.RegisterNode(ctx, w.fast, nodeName(i)) }); err != nil {
		return err
	}

	// Every claim is provisioned and Bound, by the whole fleet at once,
	// before any round is measured.
	if err := w.provision(ctx, bin); err != nil {
		return err
	}

	apiCPU, apiRSS, bytes, events, instRSS, instCPU := series{}, series{}, series{}, series{}, series{}, series{}
	var notes []string
	var procs []*cluster.Process
	defer func() {
		for _, p := range procs {
			p.Stop()
		}
	}()
	// x = 0: the control plane's own claim watchers (the PV controller and
	// others in kube-controller-manager), what every later figure includes.
	for _, n := range append([]int{0}, o.nodes...) {
		start := time.Now()
		var started []*cluster.Process
		var addrs []string
		for i := len(procs); i < n; i++ {
			p, addr, err := w.startInstance(bin, i)
			if err != nil {
				return err
			}
			procs, started, addrs = append(procs, p), append(started, p), append(addrs, addr)
		}
		for k, addr := range addrs {
			if err := cluster.WaitReady(ctx, addr, 5*time.Minute); err != nil {
				return fmt.Errorf("%s: %w (log in %s)", started[k].Name, err, tmp)
			}
		}
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("%s exited (log in %s)", p.Name, tmp)
			}
		}
		fmt.Printf("fleet: %d instances ready on their provisioned claims after %s\n", n, time.Since(start).Round(time.Second))
		var pids []int
		for _, p := range procs {
			pids = append(pids, p.Pid())
		}
		x := float64(n)
		settled, err := procstat.SettledAll(pids, procstat.SettleInterval, procstat.SettleTolerance, procstat.SettleQuiet, procstat.SettleTries)
		if err != nil {
			return err
		}
		var rss []float64
		for _, r := range settled {
			rss = append(rss, float64(r)/(1<<20))
		}
		if n > 0 {
			instRSS.add(seriesPlinth, x, rss...)
		}
		if err := w.calm(append([]int{w.cp.APIServer}, pids...)); err != nil {
			return err
		}
		var cpus, sent, evs, icpu, arss []float64
		for r := range o.runs {
			var f churnFigures
			idle, err := w.idleAround(ctx, idleWindow, pids, func() (err error) {
				f, err = w.churn(ctx, max(n, 1), o.changes, pids)
				return err
			})
			if err != nil {
				return err
			}
			a, err := procstat.RSS(w.cp.APIServer)
			if err != nil {
				return err
			}
			apiPer, instPer := f.perChange(f.apiCPU, idle.api), f.perChange(f.instCPU, idle.inst)
			ev, by := f.watchPerChange(idle)
			cpus, sent, evs = append(cpus, ms(apiPer)), append(sent, by), append(evs, ev)
			icpu, arss = append(icpu, ms(instPer)), append(arss, float64(a)/(1<<20))
			fmt.Printf("fleet: %3d instances round %d (%s): apiserver %.3f ms CPU/change (idle %.1f%%), RSS %.0f MiB; %.0f B and %.2f events sent per change (%.2f idle events/s taken off; %.2f before); instances %.3f ms CPU/change (idle %.1f%%), RSS median %.1f MiB\n",
				n, r+1, f.wall.Round(time.Second), ms(apiPer), 100*idle.api, float64(a)/(1<<20), by, ev, idle.events, f.eventsPerChange, ms(instPer), 100*idle.inst, result.Median(rss))
		}
		apiCPU.add(seriesPlinth, x, cpus...)
		apiRSS.add(seriesPlinth, x, arss...)
		bytes.add(seriesPlinth, x, sent...)
		events.add(seriesPlinth, x, evs...)
		if n > 0 {
			instCPU.add(seriesPlinth, x, icpu...)
		}
	}
	for _, p := range procs {
		p.Stop()
	}
	procs = nil

	// The design change, measured without plinth-node: n watches of all
	// claims (what n nodes' informers are to the API server) against n
	// watches of one node's claims each, by label.
	for _, n := range o.nodes {
		for _, selected := range []bool{false, true} {
			name := map[bool]string{false: seriesAll, true: seriesSelected}[selected]
			stop, received, err := newWatchers(ctx, w.fast, n, selected)
			if err != nil {
				return err
			}
			var cpus, sent []float64
			for r := range o.runs {
				var f churnFigures
				idle, err := w.idleAround(ctx, idleWindow, nil, func() (err error) {
					f, err = w.churn(ctx, n, o.changes, nil)
					return err
				})
				if err != nil {
					stop()
					return err
				}
				apiPer := f.perChange(f.apiCPU, idle.api)
				_, by := f.watchPerChange(idle)
				cpus, sent = append(cpus, ms(apiPer)), append(sent, by)
				fmt.Printf("fleet: %3d watchers (%s) round %d (%s): apiserver %.3f ms CPU/change (idle %.1f%%), %.0f B sent per change\n", n, name, r+1, f.wall.Round(time.Second), ms(apiPer), 100*idle.api, by)
			}
			stop()
			fmt.Printf("fleet: %3d watchers (%s) received %d events for %d changes\n", n, name, received(), o.runs*o.changes)
			apiCPU.add(name, float64(n), cpus...)
			bytes.add(name, float64(n), sent...)
		}
	}
	notes = append(notes, fmt.Sprintf("All %d claims were provisioned and Bound in %s by the whole fleet (%d instances) running at once.",
		o.claims, w.provisioned.Round(time.Second), maxN))
	notes = append(notes, extrapolate(bytes, events, apiCPU, instRSS, o)...)
	return writeResults(o, notes, apiCPU, apiRSS, bytes, events, instRSS, instCPU)
}

// idleWindow is the length of each idle window around a round.
const idleWindow = 10 * time.Second

// calm waits until pids (kube-apiserver and the instances) use CPU at a
// steady rate, windows of 5 s within 0.02 cores of each other three
// times in a row, so that no round starts while the fleet still digests
// its start; it says so when they do not within 2 minutes, and goes on.
func (w *world) calm(pids []int) error {
	start := time.Now()
	rate, ok, err := procstat.Calm(pids, 5*time.Second, 0.02, 3, 24)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Printf("fleet: WARNING: CPU not steady after %s (last %.1f%% of a core); measuring anyway\n", time.Since(start).Round(time.Second), 100*rate)
		return nil
	}
	fmt.Printf("fleet: CPU steady at %.1f%% of a core after %s\n", 100*rate, time.Since(start).Round(time.Second))
	return nil
}

// provision has every node's instance make its volumes and PVs, the
// whole fleet at once, until every claim is Bound, then stops them. The
// measured instances restart on what they made. An instance that exits
// ends the wait at once. (Until each node selected its claims by label
// and the admission server had FlowSchemas of its own,
// clusterobjects.AdmissionFlowSchemas, a hundred instances provisioning
// at once starved binding, and the benchmark provisioned ten instances
// at a time.)
func (w *world) provision(ctx context.Context, bin string) error {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var fleet []*cluster.Process
	defer func() {
		for _, p := range fleet {
			p.Stop()
		}
	}()
	for i := range w.o.maxNodes() {
		p, _, err := w.startInstance(bin, i)
		if err != nil {
			return err
		}
		fleet = append(fleet, p)
		go func() {
			select {
			case <-p.Done():
				cancel(fmt.Errorf("%s exited while provisioning (log in %s)", p.Name, w.tmp))
			case <-ctx.Done():
			}
		}()
	}
	if err := cluster.WaitBound(ctx, w.fast, namespace, w.o.claims, 30*time.Minute); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return fmt.Errorf("provisioning with %d instances: %w", len(fleet), err)
	}
	w.provisioned = time.Since(start)
	fmt.Printf("fleet: %d instances, all running, provisioned %d claims in %s\n", len(fleet), w.o.claims, w.provisioned.Round(time.Second))
	return nil
}

// startInstance starts plinth-node for node i, its data directory and
// log the same at every start, and returns it with the address of its
// health endpoint.
func (w *world) startInstance(bin string, i int) (*cluster.Process, string, error) {
	addr, err := metricsAddress(i)
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(w.tmp, nodeName(i))
	args, err := cluster.PlinthNodeArgs(w.cp, nodeName(i), dir)
	if err != nil {
		return nil, "", err
	}
	args = append(args, "--metrics-address="+addr)
	p, err := cluster.StartProcess(nodeName(i), bin, args, nil, dir+".log")
	return p, addr, err
}

// metricsPortBase is the first of the instances' metrics ports, one per
// node, below the kernel's ephemeral ports (32768 and up by default): a
// port the kernel handed out free could be taken by one of the fleet's
// own outgoing connections before its instance binds it, which 200
// instances starting at once did.
const metricsPortBase = 21000

// metricsAddress is the metrics address of node i's instance, checked
// free.
func metricsAddress(i int) (string, error) {
	addr := "127.0.0.1:" + strconv.Itoa(metricsPortBase+i)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics address of %s: %w", nodeName(i), err)
	}
	return addr, l.Close()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
