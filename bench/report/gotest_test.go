package main

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"source.plinth.dev/bench/result"
)

const goOutput = `goos: linux
pkg: example.com/loop
cpu: Some CPU
BenchmarkCreateRemove/existing=0/impl=library-2     	   10000	    100000 ns/op
BenchmarkCreateRemove/existing=0/impl=losetup-2     	     500	   2000000 ns/op
BenchmarkCreateRemove/existing=200/impl=library-2   	   10000	    120000 ns/op
BenchmarkCreateRemove/existing=200/impl=losetup-2   	     500	   3000000 ns/op
BenchmarkCreateRemove/existing=0/impl=library-2     	   10000	    110000 ns/op
BenchmarkCreateRemove/existing=0/impl=losetup-2     	     500	   2200000 ns/op
pkg: example.com/resizer
BenchmarkResize	       1	20000000000 ns/op	       210 ms-visible-median	       300 ms-visible-p90	       180 ms-kcm-median	         1.17 ratio-visible/kcm
BenchmarkRate-8	       1	20000000000 ns/op	       40 claims/s	       50 bare-claims/s
`

func testSpecs() []goSpec {
	return []goSpec{
		{Pkg: "example.com/loop",
			Result: result.Result{Name: "loop", X: result.Axis{Label: "devices"}, Y: seconds, Baseline: "losetup"},
			Rules:  []goRule{{Bench: regexp.MustCompile(`^CreateRemove/existing=(?P<x>\d+)/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}}},
		{Pkg: "example.com/resizer",
			Result: result.Result{Name: "resize", Y: seconds, Baseline: "kcm", Notes: []string{"fixed note"}},
			Rules: []goRule{
				{Bench: regexp.MustCompile(`^Resize$`), Metric: "ms-visible-median", Series: "plinth", Scale: msToS},
				{Bench: regexp.MustCompile(`^Resize$`), Metric: "ms-kcm-median", Series: "kcm", Scale: msToS},
			}},
		{Pkg: "example.com/resizer",
			Result: result.Result{Name: "rate", Y: seconds},
			Rules:  []goRule{{Bench: regexp.MustCompile(`^Rate$`), Metric: "claims/s", Series: "plinth", Scale: 500, Per: true}}},
	}
}

func runsOf(t *testing.T, r *result.Result, series string, x float64) []float64 {
	t.Helper()
	for _, s := range r.Series {
		for _, p := range s.Points {
			if s.Name == series && p.X == x {
				return p.Runs
			}
		}
	}
	t.Fatalf("%s: no series %s at x=%g in %+v", r.Name, series, x, r.Series)
	return nil
}

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12*math.Max(1, math.Abs(b[i])) {
			return false
		}
	}
	return true
}

func TestFromGoTest(t *testing.T) {
	lines, err := parseGoTest(strings.NewReader(goOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 8 || lines[0].Name != "CreateRemove/existing=0/impl=library" || lines[6].Name != "Resize" || lines[7].Name != "Rate" {
		t.Fatalf("parsed %+v", lines)
	}
	rs, err := fromGoTest(lines, testSpecs())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d results, want 3", len(rs))
	}
	loop, resize, rate := rs[0], rs[1], rs[2]
	// The baseline comes first, whatever order the lines had; every
	// -count run is one run of its point.
	if loop.Series[0].Name != "losetup" {
		t.Errorf("series order %+v: want the baseline first", loop.Series)
	}
	for _, c := range []struct {
		r      *result.Result
		series string
		x      float64
		want   []float64
	}{
		{loop, "library", 0, []float64{100e-6, 110e-6}},
		{loop, "losetup", 0, []float64{2e-3, 2.2e-3}},
		{loop, "library", 200, []float64{120e-6}},
		{resize, "plinth", 0, []float64{0.21}},
		{resize, "kcm", 0, []float64{0.18}},
		{rate, "plinth", 0, []float64{12.5}},
	} {
		if got := runsOf(t, c.r, c.series, c.x); !near(got, c.want) {
			t.Errorf("%s %s x=%g: runs %v, want %v", c.r.Name, c.series, c.x, got, c.want)
		}
	}
	// Metrics no rule uses are kept as notes; ns/op of a one-shot is not.
	notes := strings.Join(resize.Notes, "\n")
	if resize.Notes[0] != "fixed note" || !strings.Contains(notes, "Resize ms-visible-p90: 300") ||
		!strings.Contains(notes, "Resize ratio-visible/kcm: 1.17") || strings.Contains(notes, "ns/op") {
		t.Errorf("resize notes: %q", resize.Notes)
	}
	if got := testSpecs()[1].Result.Notes; len(got) != 1 {
		t.Errorf("conversion changed the spec's notes: %q", got)
	}
}

func TestFromGoTestRefuses(t *testing.T) {
	for name, input := range map[string]string{
		"unmapped benchmark": "pkg: example.com/loop\nBenchmarkOther-2  10  100 ns/op\n",
		"missing metric":     "pkg: example.com/resizer\nBenchmarkResize  1  100 ns/op  3 ms-kcm-median\n",
		"no package":         "BenchmarkResize  1  100 ns/op\n",
		"rate of zero":       "pkg: example.com/resizer\nBenchmarkRate  1  100 ns/op  0 claims/s\n",
	} {
		lines, err := parseGoTest(strings.NewReader(input))
		if err == nil {
			_, err = fromGoTest(lines, testSpecs())
		}
		if err == nil {
			t.Errorf("%s: converted without an error", name)
		}
	}
}

// TestBaselineMissing: a baseline sub-benchmark that did not run leaves
// the result without ratios and says so, rather than failing the report.
func TestBaselineMissing(t *testing.T) {
	lines, err := parseGoTest(strings.NewReader("pkg: example.com/loop\nBenchmarkCreateRemove/existing=0/impl=library-2  10  100 ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := fromGoTest(lines, testSpecs())
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Baseline != "" || !strings.Contains(strings.Join(rs[0].Notes, " "), "losetup did not run") {
		t.Errorf("result %+v", rs[0])
	}
}

// TestGoSpecs checks the project's table: every spec makes a valid result
// name, its rules' regexps give a series, and the baseline is one of the
// series a rule can produce (a fixed name, or one from an impl= group).
func TestGoSpecs(t *testing.T) {
	names := map[string]bool{}
	for _, sp := range goSpecs {
		r := sp.Result
		r.Series = []result.Series{{Name: "x", Points: []result.Point{{Runs: []float64{1}}}}}
		r.Baseline = ""
		if err := r.Validate(); err != nil || names[r.Name] {
			t.Errorf("spec %s: %v (or repeated)", r.Name, err)
		}
		names[r.Name] = true
		fixed := map[string]bool{}
		grouped := false
		for _, rule := range sp.Rules {
			hasSeries := rule.Bench.SubexpIndex("series") >= 0
			if rule.Series == "" && !hasSeries || rule.Scale == 0 || rule.Metric == "" {
				t.Errorf("spec %s: rule %s has no series, scale or metric", r.Name, rule.Bench)
			}
			fixed[rule.Series] = true
			grouped = grouped || hasSeries
		}
		if b := sp.Result.Baseline; b != "" && !fixed[b] && !grouped {
			t.Errorf("spec %s: baseline %s is no rule's series", r.Name, b)
		}
	}
}
