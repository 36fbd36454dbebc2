package main

import (
	"fmt"
	"time"

	"source.plinth.dev/bench/fio"
	"source.plinth.dev/bench/result"
	"source.plinth.dev/node/kubernetes/volumehealth"
)

// The series: runs clear of every walk (the baseline) and inside one.
const (
	noWalk = "no-walk"
	inWalk = "walk"
)

// metric is one figure of a fio job.
type metric struct {
	name string
	y    result.Axis
	of   func(fio.Measure) float64
}

var metricsOut = []metric{
	{"p99", result.Axis{Label: "p99 completion latency", Unit: "s"}, func(m fio.Measure) float64 { return m.P99 }},
	{"p50", result.Axis{Label: "p50 completion latency", Unit: "s"}, func(m fio.Measure) float64 { return m.P50 }},
	{"mean", result.Axis{Label: "mean completion latency", Unit: "s"}, func(m fio.Measure) float64 { return m.Mean }},
	{"iops", result.Axis{Label: "IOPS"}, func(m fio.Measure) float64 { return m.IOPS }},
}

// writeResults writes one Result per metric (x: the job, a series with
// the walk running and the baseline without) and one of the walk's rate.
func writeResults(o options, b *bench) error {
	by := map[class][]fioRun{}
	for _, r := range b.runs {
		c := classify(r.s, b.windows, b.full, margin, b.o.interval)
		by[c] = append(by[c], r)
	}
	notes := b.notes(o, by)
	for _, m := range metricsOut {
		r := &result.Result{
			Name:     "audit-" + m.name,
			Title:    "fio on a pod's volume while the quota audit walks another volume: " + m.y.Label,
			X:        result.Axis{Label: "job (1 " + jobs[0].Name + ", 2 " + jobs[1].Name + ")"},
			Y:        m.y,
			Baseline: noWalk,
			Goals: []string{"Issue 40 item 2 sets no number: the audit's cost to a pod, the walk's figures beside the same node's without a walk " +
				"(for a latency, the ratio is the walk's over the baseline's; 1 is no cost)."},
			Notes: notes,
		}
		for _, s := range []struct {
			name string
			c    class
		}{{noWalk, baseline}, {inWalk, walking}} {
			series := result.Series{Name: s.name}
			for i, j := range jobs {
				var vals []float64
				for _, run := range by[s.c] {
					vals = append(vals, m.of(run.m[j.Name]))
				}
				series.Points = append(series.Points, result.Point{X: float64(i + 1), Runs: vals})
			}
			r.Series = append(r.Series, series)
		}
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	return writeWalkRate(o, b, notes)
}

// walkRates is the pace of each walk of the full big volume among ws:
// its entries (files, their directories and its root) over the walk's
// time. A window of the fio volume's walk alone (its two entries, timed
// at 0.0 s, ended between other scrapes than the big one's) is not one:
// at the audit's rate limit a walk of the big volume takes at least
// expectedWalk less the limiter's burst, so a window under half of that
// is left out.
func walkRates(ws []window, full time.Time, files int) []float64 {
	var rates []float64
	for _, w := range ws {
		if !w.start.Before(full) && w.dur >= expectedWalk(files)/2 {
			rates = append(rates, float64(bigEntries(files))/w.dur.Seconds())
		}
	}
	return rates
}

// writeWalkRate writes the walk's pace (walkRates).
func writeWalkRate(o options, b *bench, notes []string) error {
	s := result.Series{Name: inWalk}
	rates := walkRates(b.windows, b.full, o.files)
	if len(rates) == 0 {
		return fmt.Errorf("no walk of the full volume was seen")
	}
	s.Points = []result.Point{{Runs: rates}}
	return result.Write(o.out, &result.Result{
		Name:  "audit-walk-rate",
		Title: fmt.Sprintf("The quota audit's walk of a volume of %d files", o.files),
		Y:     result.Axis{Label: "entries walked per second"},
		Series: []result.Series{
			s,
		},
		Goals: []string{fmt.Sprintf("None: the audit walks at most volumehealth.DefaultAuditRate (%d) entries a second, so one walk of %d files takes at least %s; a rate below it is the node's own speed.",
			volumehealth.DefaultAuditRate, o.files, expectedWalk(o.files).Round(time.Second))},
		Notes: notes,
	})
}

// notes describe the setup and this run's classification.
func (b *bench) notes(o options, by map[class][]fioRun) []string {
	return []string{
		fmt.Sprintf("The VM node (test/nodevm): the node image's test variant with fio's image added, in qemu under TCG (no KVM), 2 vCPUs, an 8 GiB sparse data disk (virtio, a file on this host's disk), XFS with enforced project quotas; plinth-node with --volume-audit-interval=%s (default 10m) so that walks and quiet spells alternate within minutes, and the audit's default rate limit of %d entries a second.",
			o.interval, volumehealth.DefaultAuditRate),
		fmt.Sprintf("The big volume: a %d GiB filesystem claim (the least whose inode limit, one per 4 KiB, holds its entries) holding %d empty files in directories of %d, made by a busybox pod (mkdir, then seq | xargs touch per directory) in %.0f s, %.0f files a second including the pod's start and a final count (find). Issue 40 asks for 1,000,000 files.",
			bigClaimGiB(o.files), o.files, perDir, b.fillTime.Seconds(), float64(o.files)/b.fillTime.Seconds()),
		fmt.Sprintf("fio (this host's, %s) in a pod (CPU request 500m) on a second claim of 512 MiB: a 128 MiB file written once in full, then each run: %s then %s, 4k, queue depth 1, libaio, direct I/O, a 1 s ramp and %s each. Each run is a new pod.",
			fio.Version(), jobs[0].Name, jobs[1].Name, o.runtime),
		fmt.Sprintf("Each run is placed against the audit's walks as this host saw them in plinth-node's metrics (plinth_operation_duration_seconds{operation=\"audit\"}, scraped every second): walk, inside a walk of the big volume begun after the fill; no-walk, at least %s clear of every walk (the audit's round goes on briefly after the volumes' walks, searching outside them). Runs this run: %d no-walk, %d walk, %d across a walk's start or end (left out), %d after the last walk seen (left out).",
			margin, len(by[baseline]), len(by[walking]), len(by[mixed]), len(by[unresolved])),
		"The machine (2 cores) is shared with other sessions; under TCG every guest instruction is emulated, so absolute latencies are many times a real machine's: the ratio to the baseline measured in the same run is what carries over, and even it is inflated where the walk's cost is CPU (emulated) rather than disk.",
	}
}
