package main

import (
	"strings"
	"testing"
	"time"

	"source.plinth.dev/bench/result"
)

// fakeTrace builds a trace whose items reached stages at given offsets.
func fakeTrace(prefix string, at map[string]map[stage]time.Duration) *trace {
	t := newTrace(prefix, len(at))
	for name, stages := range at {
		s := new([numStages]time.Duration)
		for st, d := range stages {
			s[st] = d
			t.count[st]++
		}
		t.seen[name] = s
	}
	return t
}

func TestTraceMarksOnceAndOnlyItsOwn(t *testing.T) {
	tr := newTrace("p1-", 2)
	tr.mark("p1-000", running)
	first := tr.last(running)
	time.Sleep(2 * time.Millisecond)
	tr.mark("p1-000", running)
	tr.mark("p2-000", running) // another measurement's pod
	if got := tr.reached(running); got != 1 {
		t.Errorf("reached = %d, want 1", got)
	}
	if tr.last(running) != first {
		t.Errorf("a second mark moved the time from %v to %v", first, tr.last(running))
	}
}

func TestTraceSummary(t *testing.T) {
	tr := fakeTrace("p1-", map[string]map[stage]time.Duration{
		"p1-000": {created: 100 * time.Millisecond, scheduled: 1 * time.Second, running: 2 * time.Second},
		"p1-001": {created: 200 * time.Millisecond, scheduled: 3 * time.Second, running: 5 * time.Second},
		"p1-002": {created: 300 * time.Millisecond, scheduled: 4 * time.Second, running: 7 * time.Second},
	})
	if got := tr.between(scheduled, running); got != 2*time.Second {
		t.Errorf("median scheduled->running = %v, want 2s", got)
	}
	got := tr.summary([]stage{created, scheduled, running})
	for _, want := range []string{"pod Running all by 7.0s", "(median 2.00s after pod scheduled)", "pod scheduled all by 4.0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
}

func TestResultsValidateWithBaselines(t *testing.T) {
	o := options{ns: []int{50, 200}, runs: 2, runs200: 1, runsLocalPath: 3, series: allSeries}
	rec := newRecorder(allSeries)
	for _, s := range allSeries {
		for _, n := range o.ns {
			for r := range o.runsAt(s, n) {
				d := time.Duration(n*(r+1)) * 100 * time.Millisecond
				rec.add(s.name, n, &measurement{running: d, deletion: d / 2,
					trace: fakeTrace(s.letter, map[string]map[stage]time.Duration{s.letter + "0": {created: 1, running: d}})})
			}
		}
	}
	res := rec.results(o)
	if len(res) != 2 {
		t.Fatalf("%d results, want running and deletion", len(res))
	}
	for _, r := range res {
		if err := r.Validate(); err != nil {
			t.Errorf("%v", err)
		}
	}
	if res[0].Baseline != "emptydir" || res[1].Baseline != "local-path" {
		t.Errorf("baselines %q, %q", res[0].Baseline, res[1].Baseline)
	}
	for _, s := range res[1].Series {
		if s.Name == "emptydir" {
			t.Errorf("deletion has an emptydir series: there is no PV to wait for")
		}
	}
	p := res[0].Series[1].Points // plinth
	if len(p) != 2 || p[0].X != 50 || len(p[0].Runs) != 2 || p[1].X != 200 || len(p[1].Runs) != 1 {
		t.Errorf("plinth points %+v, want N=50 with 2 runs, N=200 with 1", p)
	}
	if got := result.Median(p[0].Runs); got != 7.5 {
		t.Errorf("median at N=50 = %g, want 7.5", got)
	}
	if l := res[1].Series[1].Points; len(l) != 2 || len(l[0].Runs) != 3 || len(l[1].Runs) != 1 {
		t.Errorf("local-path points %+v, want N=50 with 3 runs, N=200 with 1", l)
	}
	want := "Runs per point: emptydir 2 at N=50, 1 at N=200; plinth 2 at N=50, 1 at N=200; local-path 3 at N=50, 1 at N=200."
	if !strings.Contains(strings.Join(res[0].Notes, "\n"), want) {
		t.Errorf("notes do not say the runs per point (%q): %q", want, res[0].Notes)
	}
}
