package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"source.plinth.dev/bench/result"
)

// goLine is one result line of `go test -bench` output: a benchmark's full
// name (without "Benchmark" and the -GOMAXPROCS suffix), the package it
// ran in, and its metrics by unit ("ns/op", "ms-visible-median").
type goLine struct {
	Pkg     string
	Name    string
	Metrics map[string]float64
}

var (
	benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)
	// The standard metrics every benchmark line may carry, which say
	// nothing about a one-shot benchmark that reports its own.
	standardMetrics = []string{"ns/op", "B/op", "allocs/op", "MB/s"}
)

// parseGoTest reads benchstat-format output (what bench.sh keeps in
// PLINTH_BENCH_OUT): "pkg:" lines name the package of the benchmark lines
// that follow. A run with -count N gives N lines per benchmark.
func parseGoTest(r io.Reader) ([]goLine, error) {
	var out []goLine
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(text, "pkg: "); ok {
			pkg = strings.TrimSpace(v)
			continue
		}
		m := benchLine.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		if pkg == "" {
			return nil, fmt.Errorf("line %d: benchmark %s before any pkg: line", n, m[1])
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("line %d: odd number of value/unit fields: %q", n, m[3])
		}
		l := goLine{Pkg: pkg, Name: m[1], Metrics: map[string]float64{}}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: metric %s: %w", n, f[i+1], err)
			}
			l.Metrics[f[i+1]] = v
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading go test output: %w", err)
	}
	return out, nil
}

// goRule maps the benchmark lines whose name Bench matches to points of one
// series: the value of metric Metric times Scale (or Scale divided by it,
// with Per, for a rate turned into a time) at x from the named group "x"
// (0 without one), in the series the named group "series" gives, or Series.
type goRule struct {
	Bench  *regexp.Regexp
	Metric string
	Series string
	Scale  float64
	Per    bool
}

// goSpec is one benchmark of the report made from Go benchmarks: the
// Result without its series, and the rules that fill them.
type goSpec struct {
	Pkg    string
	Result result.Result
	Rules  []goRule
}

// fromGoTest turns go test lines into Results, one per spec that any line
// matched; series and points come in the order the lines came (bench.sh
// runs baselines after what they are compared with, and the spec's rules
// can put the baseline where they like). Metrics of a matched benchmark that
// no rule uses become notes (median and spread over the runs), so that
// nothing a benchmark reports is lost on the way. A line that no spec
// matches is an error: a benchmark missing from the report must be noticed,
// not skipped.
func fromGoTest(lines []goLine, specs []goSpec) ([]*result.Result, error) {
	var out []*result.Result
	built := map[int]*result.Result{}
	extra := map[int]map[string][]float64{} // spec → "name metric" → values
	var extraOrder = map[int][]string{}
	for _, l := range lines {
		matched := false
		for si, sp := range specs {
			if sp.Pkg != l.Pkg {
				continue
			}
			used := map[string]bool{}
			for _, rule := range sp.Rules {
				m := rule.Bench.FindStringSubmatch(l.Name)
				if m == nil {
					continue
				}
				matched = true
				used[rule.Metric] = true
				v, ok := l.Metrics[rule.Metric]
				if !ok {
					return nil, fmt.Errorf("%s %s: no metric %s", l.Pkg, l.Name, rule.Metric)
				}
				series, x, err := ruleTarget(rule, m)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", l.Pkg, l.Name, err)
				}
				r := built[si]
				if r == nil {
					c := sp.Result
					c.Goals, c.Notes, c.Series = slices.Clone(c.Goals), slices.Clone(c.Notes), nil
					r = &c
					built[si] = r
					out = append(out, r)
				}
				if rule.Per {
					v = rule.Scale / v
				} else {
					v *= rule.Scale
				}
				// JSON has no Inf or NaN: a rate of 0 or a 0/0 ratio
				// is a broken measurement, said here by name.
				if math.IsInf(v, 0) || math.IsNaN(v) {
					return nil, fmt.Errorf("%s %s: metric %s gives %g", l.Pkg, l.Name, rule.Metric, v)
				}
				addRun(r, series, x, v)
			}
			if len(used) == 0 {
				continue
			}
			if extra[si] == nil {
				extra[si] = map[string][]float64{}
			}
			for unit, v := range l.Metrics {
				if used[unit] || slices.Contains(standardMetrics, unit) {
					continue
				}
				k := l.Name + " " + unit
				if _, ok := extra[si][k]; !ok {
					extraOrder[si] = append(extraOrder[si], k)
				}
				extra[si][k] = append(extra[si][k], v)
			}
		}
		if !matched {
			return nil, fmt.Errorf("benchmark %s in %s has no rule in the report's table (bench/report/gobench.go)", l.Name, l.Pkg)
		}
	}
	for si, r := range built {
		keys := extraOrder[si]
		slices.Sort(keys)
		for _, k := range keys {
			vs := extra[si][k]
			lo, hi := result.Spread(vs)
			note := fmt.Sprintf("%s: %s", k, formatNumber(result.Median(vs)))
			if len(vs) > 1 {
				note += fmt.Sprintf(" (median of %d runs, %s–%s)", len(vs), formatNumber(lo), formatNumber(hi))
			}
			r.Notes = append(r.Notes, note)
		}
		// The baseline first, so that the table reads from it; a
		// baseline that did not run (a failed sub-benchmark) leaves the
		// figures without ratios, and says so.
		if i := slices.IndexFunc(r.Series, func(s result.Series) bool { return s.Name == r.Baseline }); i > 0 {
			b := r.Series[i]
			r.Series = slices.Insert(slices.Delete(r.Series, i, i+1), 0, b)
		} else if i < 0 && r.Baseline != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("The baseline %s did not run: no ratios.", r.Baseline))
			r.Baseline = ""
		}
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ruleTarget is the series and x of a line matched by rule (m is the match).
func ruleTarget(rule goRule, m []string) (series string, x float64, err error) {
	series = rule.Series
	for i, name := range rule.Bench.SubexpNames() {
		switch name {
		case "series":
			series = m[i]
		case "x":
			if x, err = strconv.ParseFloat(m[i], 64); err != nil {
				return "", 0, fmt.Errorf("x %q: %w", m[i], err)
			}
		}
	}
	if series == "" {
		return "", 0, fmt.Errorf("rule %s gives no series", rule.Bench)
	}
	return series, x, nil
}

// addRun adds v as one more run of series at x, creating both as needed.
func addRun(r *result.Result, series string, x, v float64) {
	si := slices.IndexFunc(r.Series, func(s result.Series) bool { return s.Name == series })
	if si < 0 {
		r.Series = append(r.Series, result.Series{Name: series})
		si = len(r.Series) - 1
	}
	s := &r.Series[si]
	pi := slices.IndexFunc(s.Points, func(p result.Point) bool { return p.X == x })
	if pi < 0 {
		s.Points = append(s.Points, result.Point{X: x})
		pi = len(s.Points) - 1
	}
	s.Points[pi].Runs = append(s.Points[pi].Runs, v)
}
