package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"source.plinth.dev/bench/fio"
	"source.plinth.dev/bench/result"
)

// kind is one kind of volume beside its floor, with issue 40's goal: the
// volume's figures at least goal times its floor's (latencies at most
// 1/goal times), on every workload and both percentiles. The floor is the
// in-pod one, so that the goal is read against what Plinth adds alone;
// extra are series shown beside it and judged against no goal (the node's
// own fio: what running in a pod costs; a filesystem volume's own file
// through a hostPath: what its file differs by from the floor's).
type kind struct {
	name   string
	floor  string
	series []string
	extra  []string
	goal   float64
}

var kinds = []kind{
	{name: "filesystem", floor: podDir, series: []string{fsRunc, fsGVisor}, extra: []string{podVolFile, nodeDir}, goal: 0.97},
	{name: "block", floor: podImage, series: []string{blockRunc}, extra: []string{nodeImage}, goal: 0.95},
}

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
// series beside its floor, the baseline.
func buildResults(all runs, nodeName string, notes []string) []*result.Result {
	prefix, on := "datapath-", ""
	if nodeName != "" {
		prefix, on = "datapath-"+nodeName+"-", " on the "+nodeName+" node"
	}
	var out []*result.Result
	for _, k := range kinds {
		for _, m := range metrics {
			r := &result.Result{
				Name:     prefix + k.name + "-" + m.name,
				Title:    fmt.Sprintf("fio on a %s volume against its floor%s: %s", k.name, on, m.y.Label),
				X:        result.Axis{Label: "workload (1-6, see notes)"},
				Y:        m.y,
				Baseline: k.floor,
				Goals: []string{fmt.Sprintf("Issue 40 item 1: a %s volume at least %.2f of its floor on every workload (for a latency: the floor's over the volume's at least %.2f, so the ratio below at most %.3f).",
					k.name, k.goal, k.goal, 1/k.goal)},
			}
			for _, s := range append(append([]string{k.floor}, k.series...), k.extra...) {
				if _, ran := all[s]; !ran {
					// A node floor, on a node that runs
					// no fio of its own.
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

// verdicts says, for each series of k, whether it meets the goal on m at
// every workload, and where not, by how much.
func verdicts(all runs, k kind, m metric) []string {
	var out []string
	for _, s := range k.series {
		var misses []string
		for i, w := range workloads {
			v, f := median(all[s][w.Name], m), median(all[k.floor][w.Name], m)
			score := v / f
			if m.lowerIsBetter {
				score = f / v
			}
			if score < k.goal {
				misses = append(misses, fmt.Sprintf("%d %s %.3f", i+1, w.Name, score))
			}
		}
		if len(misses) == 0 {
			out = append(out, fmt.Sprintf("Goal met: %s at least %.2f of %s on %s at every workload.", s, k.goal, k.floor, m.name))
			continue
		}
		out = append(out, fmt.Sprintf("Goal NOT met: %s below %.2f of %s on %s (as a fraction of the floor, higher is better): %s.",
			s, k.goal, k.floor, m.name, strings.Join(misses, ", ")))
	}
	return out
}

func median(ms []fio.Measure, m metric) float64 {
	var v []float64
	for _, x := range ms {
		v = append(v, m.of(x))
	}
	return result.Median(v)
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
	if slices.Contains(b.node.targets(), nodeDir) {
		nodeFloors = " floor-dir-node and floor-image-node are the node's own fio on the same two files, outside any pod (no verdict: what the pod costs)."
	}
	return append([]string{
		"Workloads (x): " + strings.Join(list, ", ") + ". fio " + fio.Version() + " (Debian's; the pods' image carries the same binary with its libraries, test/images.Fio), libaio, direct=1, 1 GiB per target, one job at a time.",
		fmt.Sprintf("%d rounds; each runs every workload on every target in turn (%s), each job %s of ramp, not counted, then %s measured. IOPS and bandwidth are fio's over the measured time; p50 and p99 are its completion-latency percentiles.",
			o.rounds, strings.Join(b.node.targets(), ", "), o.timing.ramp, o.timing.runtime),
		b.node.describe() + " The baselines run in a pod like the volumes' (same image, one-CPU request, runc), so a volume's ratio is what Plinth adds: floor-dir-pod is a pod's fio on a file in a plain directory of the data filesystem (hostPath " + b.floorDir + "); floor-image-pod is a pod's fio with O_DIRECT on the block volume's own image file (hostPath of the file, " + b.image + "). floor-volfile-pod is a pod's fio on the filesystem volume's own file (hostPath of the file, " + b.volFile + "; no verdict): the file filesystem-runc reads, reached without Plinth's publication, so that filesystem-runc against it is what the publication costs, and it against floor-dir-pod what the two files differ by." + nodeFloors + " filesystem-runc and filesystem-gvisor are a pod's fio on a file in one 2 GiB filesystem claim, under runc and under gVisor (RuntimeClass gvisor; judged against the runc floor, so its ratio is gVisor's cost and Plinth's together); block-runc is a pod's fio on the 1 GiB block claim's device (Plinth's loop device over that image).",
		"Each pod requests one CPU (Burstable): a BestEffort pod's cgroup would have 2 CPU shares against the node's fio's 1024.",
		"Before the rounds every target was written in full once (1 MiB writes), so writes overwrite allocated blocks and reads read data: " + strings.Join(fill, ", ") + ".",
		"Known: the loop device's 4k random-read gap at depth 32 is the kernel loop driver's per-request work (docs/benchmarks.md, \"the loop device's random-read gap\"), not a setting of Plinth's.",
		"The machine (2 cores) was shared with other sessions; the figures of one run are compared with each other.",
	}, b.node.caveats()...)
}
