package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"source.plinth.dev/bench/fio"
	"source.plinth.dev/bench/result"
)

// kind is one kind of volume beside its floors, with issue 40's goal: the
// volume's figures at least goal times its floor's (latencies at most
// 1/goal times), on every workload and both percentiles. The floors are
// in-pod ones, so that the goal is read against what Plinth adds alone;
// the first is the issue's own floor and each result's baseline. extra
// are series shown beside them and judged against no goal (the node's own
// fio: what running in a pod costs).
type kind struct {
	name   string
	floors []string
	series []string
	extra  []string
	goal   float64
}

// The filesystem volume is judged against two floors: a file in a plain
// directory (the floor), and its own file through a hostPath,
// which tells what the publication costs from what two files of one
// filesystem differ by.
var kinds = []kind{
	{name: "filesystem", floors: []string{podDir, podVolFile}, series: []string{fsRunc, fsGVisor}, extra: []string{nodeDir}, goal: 0.97},
	{name: "block", floors: []string{podImage}, series: []string{blockRunc}, extra: []string{nodeImage}, goal: 0.95},
}

// level is the confidence of the interval a verdict reads; minCovered the
// least it takes to call a goal met or not (5 rounds reach 0.94, 4 only
// 0.88: fewer rounds leave every goal undecided).
const (
	level      = 0.95
	minCovered = 0.9
)

// metric is one figure fio reports for every workload.
type metric struct {
	name string
	y    result.Axis
	of   func(fio.Measure) float64
	// lowerIsBetter: a latency, whose goal is the floor's over the
	// volume's.
	lowerIsBetter bool
}

var metrics = []metric{
	{name: "iops", y: result.Axis{Label: "IOPS"}, of: func(m fio.Measure) float64 { return m.IOPS }},
	{name: "bandwidth", y: result.Axis{Label: "bandwidth per second", Unit: "B"}, of: func(m fio.Measure) float64 { return m.Bandwidth }},
	{name: "p50", y: result.Axis{Label: "p50 completion latency", Unit: "s"}, of: func(m fio.Measure) float64 { return m.P50 }, lowerIsBetter: true},
	{name: "p99", y: result.Axis{Label: "p99 completion latency", Unit: "s"}, of: func(m fio.Measure) float64 { return m.P99 }, lowerIsBetter: true},
}

// buildResults makes one Result per kind of volume and metric, the
// workloads along x (numbered as the notes list them), each volume's
// series beside its floor, the baseline. label, when set, names a run
// that stands beside the default one in the same report (-label).
func buildResults(all runs, nodeName, label string, notes []string) []*result.Result {
	prefix, on := "datapath-", ""
	if nodeName != "" {
		prefix, on = prefix+nodeName+"-", " on the "+nodeName+" node"
	}
	if label != "" {
		prefix, on = prefix+label+"-", on+" ("+label+")"
	}
	var out []*result.Result
	for _, k := range kinds {
		if _, ran := all[k.floors[0]]; !ran {
			// A run of other targets alone (-targets).
			continue
		}
		for _, m := range metrics {
			r := &result.Result{
				Name:     prefix + k.name + "-" + m.name,
				Title:    fmt.Sprintf("fio on a %s volume against its floor%s: %s", k.name, on, m.y.Label),
				X:        result.Axis{Label: "workload (1-6, see notes)"},
				Y:        m.y,
				Baseline: k.floors[0],
				Goals: []string{fmt.Sprintf("Issue 40 item 1: a %s volume at least %.2f of its floor on every workload (for a latency: the floor's over the volume's at least %.2f, so the ratio below at most %.3f).",
					k.name, k.goal, k.goal, 1/k.goal)},
			}
			for _, s := range slices.Concat(k.floors, k.series, k.extra) {
				if _, ran := all[s]; !ran {
					// A node floor, on a node that runs
					// no fio of its own, or a target
					// -targets left out.
					continue
				}
				series := result.Series{Name: s}
				for i, w := range workloads {
					var values []float64
					for _, v := range all[s][w.Name] {
						values = append(values, m.of(v))
					}
					series.Points = append(series.Points, result.Point{X: float64(i + 1), Runs: values})
				}
				r.Series = append(r.Series, series)
			}
			r.Notes = append(verdicts(all, k, m), notes...)
			out = append(out, r)
		}
	}
	return out
}

// verdicts says, for each series of k and each of its floors, whether
// the series meets the goal on m at every workload. A round runs a series
// and its floors within minutes of each other, so each round's ratio of
// the two leaves out the machine's drift from round to round; a verdict
// reads the interval of the median of those ratios (result.MedianInterval):
// met where the interval's low end reaches the goal at every workload, NOT
// met where its high end is below the goal at some workload, and undecided
// where the rounds cannot tell (or are too few to tell anything).
func verdicts(all runs, k kind, m metric) []string {
	var out []string
	for _, s := range k.series {
		for _, f := range k.floors {
			if all[s] == nil || all[f] == nil {
				continue
			}
			out = append(out, verdict(all, k, m, s, f))
		}
	}
	return out
}

// verdict is one series s against one floor f.
func verdict(all runs, k kind, m metric, s, f string) string {
	var figures, below, open []string
	var n int
	var covered float64
	for i, w := range workloads {
		ratios := pairedRatios(all[s][w.Name], all[f][w.Name], m)
		lo, hi, c := result.MedianInterval(ratios, level)
		n, covered = len(ratios), c
		fig := fmt.Sprintf("%d %.3f [%.3f, %.3f]", i+1, result.Median(ratios), lo, hi)
		figures = append(figures, fig)
		switch {
		case hi < k.goal:
			below = append(below, fmt.Sprintf("%d", i+1))
		case lo < k.goal:
			open = append(open, fmt.Sprintf("%d", i+1))
		}
	}
	if covered < minCovered {
		// Too few rounds for any interval: no verdict either way.
		below, open = nil, []string{"all"}
	}
	how := fmt.Sprintf("the median of %d rounds' ratios to %s (as a fraction of the floor, higher is better) and its %.0f%% interval, by workload: %s",
		n, f, 100*covered, strings.Join(figures, ", "))
	switch {
	case len(below) > 0:
		return fmt.Sprintf("Goal NOT met: %s below %.2f of %s on %s at workloads %s; %s.", s, k.goal, f, m.name, strings.Join(below, ", "), how)
	case len(open) > 0:
		return fmt.Sprintf("Goal undecided: %s against %.2f of %s on %s, the rounds cannot tell at workloads %s; %s.", s, k.goal, f, m.name, strings.Join(open, ", "), how)
	}
	return fmt.Sprintf("Goal met: %s at least %.2f of %s on %s at every workload; %s.", s, k.goal, f, m.name, how)
}

// pairedRatios are round by round the series' figure over its floor's
// (the floor's over the series' for a latency), skipping a round where
// either is zero.
func pairedRatios(series, floor []fio.Measure, m metric) []float64 {
	var out []float64
	for i := 0; i < len(series) && i < len(floor); i++ {
		v, f := m.of(series[i]), m.of(floor[i])
		if v == 0 || f == 0 {
			continue
		}
		if m.lowerIsBetter {
			v, f = f, v
		}
		out = append(out, v/f)
	}
	return out
}

// notes are what every Result of the run says about its setup.
func (b *bench) notes(o options) []string {
	var list []string
	for i, w := range workloads {
		list = append(list, fmt.Sprintf("%d %s", i+1, w.Name))
	}
	var fill []string
	for _, t := range b.node.filled() {
		fill = append(fill, fmt.Sprintf("%s %s", t, b.fill[t].Round(100*time.Millisecond)))
	}
	nodeFloors := ""
	if slices.Contains(b.targets(), nodeDir) {
		nodeFloors = " floor-dir-node and floor-image-node are the node's own fio on the same two files, outside any pod (no verdict: what the pod costs)."
	}
	return append([]string{
		"Workloads (x): " + strings.Join(list, ", ") + ". fio " + fio.Version() + " (Debian's; the pods' image carries the same binary with its libraries, test/images.Fio), libaio, direct=1, 1 GiB per target, one job at a time.",
		fmt.Sprintf("%d rounds; each runs every workload on every target in turn (%s, in this order in odd rounds and the reverse in even ones), each job %s of ramp, not counted, then %s measured. IOPS and bandwidth are fio's over the measured time; p50 and p99 are its completion-latency percentiles. A verdict reads each round's ratio of a volume to its floor (so the machine's drift between rounds cancels) and the 95%% confidence interval of those ratios' median (5 rounds reach 94%%: then the interval is their whole spread): met if its low end reaches the goal at every workload, NOT met if its high end is below the goal somewhere, undecided otherwise or with fewer than 5 rounds.",
			o.rounds, strings.Join(b.targets(), ", "), o.timing.ramp, o.timing.runtime),
		b.node.describe() + " The baselines run in a pod like the volumes' (same image, one-CPU request, runc), so a volume's ratio is what Plinth adds: floor-dir-pod is a pod's fio on a file in a plain directory of the data filesystem (hostPath " + b.floorDir + "); floor-image-pod is a pod's fio with O_DIRECT on the block volume's own image file (hostPath of the file, " + b.image + "). floor-volfile-pod is a pod's fio on the filesystem volume's own file (hostPath of the file, " + b.volFile + "), the filesystem volumes' second floor: the file filesystem-runc reads, reached without Plinth's publication, so that filesystem-runc against it is what the publication costs, and it against floor-dir-pod what the two files differ by." + nodeFloors + " filesystem-runc and filesystem-gvisor are a pod's fio on a file in one 2 GiB filesystem claim, under runc and under gVisor (RuntimeClass gvisor; judged against the runc floor, so its ratio is gVisor's cost and Plinth's together); block-runc is a pod's fio on the 1 GiB block claim's device (Plinth's loop device over that image).",
		"Each pod requests one CPU (Burstable): a BestEffort pod's cgroup would have 2 CPU shares against the node's fio's 1024.",
		"Before the rounds every target was written in full once (1 MiB writes), so writes overwrite allocated blocks and reads read data: " + strings.Join(fill, ", ") + ".",
		"Known: the loop device's 4k random-read gap at depth 32 is the kernel loop driver's per-request work (docs/benchmarks.md, \"the loop device's random-read gap\"), not a setting of Plinth's.",
		"The machine (2 cores) was shared with other sessions; the figures of one run are compared with each other.",
	}, b.node.caveats()...)
}
