package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"source.plinth.dev/bench/result"
)

// recorder collects every run's figures, per series and N.
type recorder struct {
	order   []string
	running map[string]map[int][]float64
	delete  map[string]map[int][]float64
	// traces keeps each point's run summaries, to name the slowest stage.
	traces map[string]map[int][]*measurement
}

func newRecorder(ss []series) *recorder {
	r := &recorder{running: map[string]map[int][]float64{}, delete: map[string]map[int][]float64{}, traces: map[string]map[int][]*measurement{}}
	for _, s := range ss {
		r.order = append(r.order, s.name)
		r.running[s.name], r.delete[s.name], r.traces[s.name] = map[int][]float64{}, map[int][]float64{}, map[int][]*measurement{}
	}
	return r
}

func (r *recorder) add(name string, n int, m *measurement) {
	r.running[name][n] = append(r.running[name][n], m.running.Seconds())
	r.delete[name][n] = append(r.delete[name][n], m.deletion.Seconds())
	r.traces[name][n] = append(r.traces[name][n], m)
}

// seriesOf turns per-N runs into result series, in N order.
func seriesOf(order []string, runs map[string]map[int][]float64, skip func(string) bool) []result.Series {
	var out []result.Series
	for _, name := range order {
		if skip(name) {
			continue
		}
		s := result.Series{Name: name}
		ns := make([]int, 0, len(runs[name]))
		for n := range runs[name] {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		for _, n := range ns {
			s.Points = append(s.Points, result.Point{X: float64(n), Runs: runs[name][n]})
		}
		out = append(out, s)
	}
	return out
}

// results are the two benchmarks: pods Running (against emptyDir) and
// deletion (Plinth against local-path; emptyDir has no PV to wait for).
func (r *recorder) results(o options) []*result.Result {
	notes := []string{
		"One cluster of test/launch (kubelet maxPods 250) for every series and run; runs of the series interleaved. " +
			"Claims of 1 MiB, WaitForFirstConsumer, each used by one busybox pod that writes a file and sleeps; claims and pods created at once (16 client goroutines, no client rate limit).",
		"Running: first create to the last pod Running, as the benchmark's watch saw it. Deletion: pods (grace 1 s) and claims deleted at once, until the last PV is gone (emptyDir: the last pod).",
		"local-path-provisioner v0.0.30 runs on the host with the admin kubeconfig and its defaults (4 workers, client-go's default 5 QPS, one helper pod per volume, polled once a second); its helper image is the project's busybox tagged as busybox.",
		"The control plane has upstream defaults (kube-controller-manager client 20 QPS, burst 30) except --pvclaimbinder-sync-period=2s.",
		"What stands between plinth and emptydir (bench/provisioning/README.md, measured by stage, by the kubelet's metrics and, in experiments, by the API server's audit log): plinth-node binds the claims it provisions (claim and status, 0.1-0.2 s after the PV), so the PV controller's serial bind is off the pods' path; " +
			"what is left is the PV controller naming the provisioner on each claim (its 20 QPS, shared with its Events), which Plinth waits for, the scheduler's 1 s binding poll (about 0.5-0.7 s), and the cluster's work per claim: about 17 more API requests a pod than with an emptyDir, 4 of them plinth-node's, 6 the kubelet's GETs of the claim and PV within its own 50 QPS; " +
			"the kubelet's CSI mount takes 0.2-0.3 s, of which plinth-node's NodePublishVolume is a few ms; and both series keep the 2-core machine busy, the pods with claims doing about 5 CPU-seconds more work per 50 pods, under a tenth of it plinth-node's. The median runs below show each for this run.",
	}
	if runs := o.runSummary(); runs != "" {
		notes = append(notes, "Runs per point: "+runs+". A local-path run takes minutes (about 10 at N = 200), and the whole benchmark must fit make bench's budget; a point of one run shows no spread.")
	}
	if len(o.kcmArgs) > 0 || len(o.nodeArgs) > 0 || len(o.kubeletArgs) > 0 || o.audit {
		notes = append(notes, fmt.Sprintf("EXPERIMENT, not the benchmark's setting: kube-controller-manager %v, kubelet %v, plinth-node %v, API server audit log %v.",
			o.kcmArgs, o.kubeletArgs, o.nodeArgs, o.audit))
	}
	notes = append(notes, r.stageNotes()...)
	running := &result.Result{
		Name:     "provisioning-running",
		Title:    "Claims provisioned and pods Running (create to all Running)",
		X:        result.Axis{Label: "claims and pods (N)"},
		Y:        result.Axis{Label: "create to all pods Running", Unit: "s"},
		Baseline: "emptydir",
		Series:   seriesOf(r.order, r.running, func(string) bool { return false }),
		Goals:    []string{"plinth within 1.2x of emptydir at N = 50, 100 and 200", "plinth at least 6x faster than local-path"},
		Notes:    notes,
	}
	if !slices.Contains(r.order, "emptydir") {
		running.Baseline = ""
	}
	deletion := &result.Result{
		Name:     "provisioning-deletion",
		Title:    "Claims deleted until every PV is gone",
		X:        result.Axis{Label: "claims and pods (N)"},
		Y:        result.Axis{Label: "delete to all PVs gone", Unit: "s"},
		Baseline: "local-path",
		Series:   seriesOf(r.order, r.delete, func(name string) bool { return name == "emptydir" }),
		Notes:    notes[:5],
	}
	if !slices.Contains(r.order, "local-path") {
		deletion.Baseline = ""
	}
	out := []*result.Result{running}
	if len(deletion.Series) > 0 {
		out = append(out, deletion)
	}
	return out
}

// runSummary says how many runs each series had at each N, when that is
// not the same everywhere.
func (o options) runSummary() string {
	var parts []string
	same := true
	for _, s := range o.series {
		var at []string
		for _, n := range o.ns {
			at = append(at, fmt.Sprintf("%d at N=%d", o.runsAt(s, n), n))
			same = same && o.runsAt(s, n) == o.runsAt(o.series[0], o.ns[0])
		}
		parts = append(parts, s.name+" "+strings.Join(at, ", "))
	}
	if same {
		return ""
	}
	return strings.Join(parts, "; ")
}

// stageNotes summarise, per series at its smallest and largest N, where
// the time of the median run went, what the node's kubelet did and what
// CPU the machine and each component used.
func (r *recorder) stageNotes() []string {
	var notes []string
	for _, name := range r.order {
		ns := slices.Sorted(maps.Keys(r.traces[name]))
		if len(ns) > 2 {
			ns = []int{ns[0], ns[len(ns)-1]}
		}
		for _, n := range ns {
			ms := slices.Clone(r.traces[name][n])
			if len(ms) == 0 {
				continue
			}
			slices.SortFunc(ms, func(a, b *measurement) int { return int(a.running - b.running) })
			m := ms[len(ms)/2]
			s := allSeries[slices.IndexFunc(allSeries, func(s series) bool { return s.name == name })]
			notes = append(notes, fmt.Sprintf("%s N=%d, median run: %s. Events until Running: %s. The node's kubelet until Running: %s. CPU until Running: %s.", name, n, m.trace.summary(s.stages()), m.events, m.kubelet, m.cpu))
		}
	}
	return notes
}

// printTable prints medians, spreads and ratios to the baseline.
func printTable(rs []*result.Result) {
	for _, r := range rs {
		fmt.Fprintf(os.Stderr, "\n%s (%s, baseline %s)\n", r.Title, r.Y.Unit, r.Baseline)
		var base map[float64]float64
		if i := slices.IndexFunc(r.Series, func(s result.Series) bool { return s.Name == r.Baseline }); i >= 0 {
			base = map[float64]float64{}
			for _, p := range r.Series[i].Points {
				base[p.X] = result.Median(p.Runs)
			}
		}
		for _, s := range r.Series {
			for _, p := range s.Points {
				med := result.Median(p.Runs)
				lo, hi := result.Spread(p.Runs)
				line := fmt.Sprintf("  %-10s N=%-4g median %7.2f  [%.2f..%.2f] runs %d", s.Name, p.X, med, lo, hi, len(p.Runs))
				if b, ok := base[p.X]; ok && s.Name != r.Baseline && b > 0 {
					line += fmt.Sprintf("  %.2fx %s", med/b, r.Baseline)
				}
				fmt.Fprintln(os.Stderr, strings.TrimRight(line, " "))
			}
		}
	}
}
