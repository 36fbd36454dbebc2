package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"source.plinth.dev/bench/result"
)

// row is one series at one x of a benchmark: what a line of its table
// shows.
type row struct {
	X        float64
	Series   string
	Median   float64
	Lo, Hi   float64
	Runs     int
	Baseline bool // this row is the baseline series
	// Ratio is Median over the baseline's median at the same x; HasRatio
	// is false where there is no baseline, no baseline point at this x,
	// or a baseline median of 0.
	Ratio    float64
	HasRatio bool
}

// rows lays out r as its table: sorted by x, and at each x the series in
// the order the Result lists them, each with the ratio of its median to the
// baseline's at the same x. Ratios of medians, not of means: one slow run
// (a machine busy for a second) moves a mean, not a median.
func rows(r *result.Result) []row {
	var xs []float64
	for _, s := range r.Series {
		for _, p := range s.Points {
			if !slices.Contains(xs, p.X) {
				xs = append(xs, p.X)
			}
		}
	}
	slices.Sort(xs)
	base := map[float64]float64{}
	for _, s := range r.Series {
		if s.Name != r.Baseline {
			continue
		}
		for _, p := range s.Points {
			base[p.X] = result.Median(p.Runs)
		}
	}
	var out []row
	for _, x := range xs {
		for _, s := range r.Series {
			for _, p := range s.Points {
				if p.X != x {
					continue
				}
				lo, hi := result.Spread(p.Runs)
				rw := row{X: x, Series: s.Name, Median: result.Median(p.Runs), Lo: lo, Hi: hi,
					Runs: len(p.Runs), Baseline: r.Baseline != "" && s.Name == r.Baseline}
				if b, ok := base[x]; ok && b != 0 {
					rw.Ratio, rw.HasRatio = rw.Median/b, true
				}
				out = append(out, rw)
			}
		}
	}
	return out
}

// formatNumber gives three significant digits without exponents for the
// magnitudes benchmarks produce: 0.0123, 1.23, 123, 12345.
func formatNumber(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a >= 0.1:
		return fmt.Sprintf("%.3f", v)
	case a >= 0.001:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3g", v), "0"), ".")
	}
	return fmt.Sprintf("%.3g", v)
}

// unitScales are the units a value in seconds or bytes is shown in, each
// with its size in the base unit, largest first. A time of 0.00042 s reads
// better as 420 µs, and 1.5e6 B as 1.43 MiB.
var unitScales = map[string][]struct {
	name string
	size float64
}{
	"s": {{"s", 1}, {"ms", 1e-3}, {"µs", 1e-6}, {"ns", 1e-9}},
	"B": {{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}},
}

// scaleFor returns the unit to show v (in unit) in and the factor to divide
// by: the largest of unit's scales that v is at least one of.
func scaleFor(v float64, unit string) (string, float64) {
	scales, ok := unitScales[unit]
	if !ok {
		return unit, 1
	}
	for _, s := range scales {
		if math.Abs(v) >= s.size {
			return s.name, s.size
		}
	}
	last := scales[len(scales)-1]
	return last.name, last.size
}

// formatValue shows v of the given unit with its own scale: "420 µs".
func formatValue(v float64, unit string) string {
	name, size := scaleFor(v, unit)
	s := formatNumber(v / size)
	if name == "" {
		return s
	}
	return s + " " + name
}

// formatSpread shows the smallest and largest run: "1.02–1.10 ms", or one
// value when they are equal (a single run).
func formatSpread(lo, hi float64, unit string) string {
	if lo == hi {
		return formatValue(lo, unit)
	}
	ln, _ := scaleFor(lo, unit)
	hn, hs := scaleFor(hi, unit)
	if ln == hn {
		return formatNumber(lo/hs) + "–" + formatValue(hi, unit)
	}
	return formatValue(lo, unit) + " – " + formatValue(hi, unit)
}

// formatRatio shows a ratio of medians: "1.18×", "12.5×", and for the
// small ratios of something far faster than its baseline "1/2500×", which
// says "2500 times less" more plainly than 0.0004×.
func formatRatio(r float64) string {
	if r > 0 && r < 0.1 {
		return "1/" + formatNumber(1/r) + "×"
	}
	return formatNumber(r) + "×"
}

// ratioCell is what a row shows in the ratio column.
func ratioCell(rw row) string {
	switch {
	case rw.Baseline:
		return "baseline"
	case rw.HasRatio:
		return formatRatio(rw.Ratio)
	}
	return "–"
}

// xCell is what a row shows in the x column: the x, or nothing for a
// benchmark measured at one x only.
func xCell(r *result.Result, rw row) string {
	if r.X.Label == "" {
		return ""
	}
	return tickLabel(rw.X)
}

// writeText prints every benchmark as one aligned plain-text table, for the
// terminal at the end of `make bench`.
func writeText(w io.Writer, results []*result.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tx\tseries\tmedian\tmin–max\truns\tratio")
	for _, r := range results {
		for _, rw := range rows(r) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Name, xCell(r, rw), rw.Series,
				formatValue(rw.Median, r.Y.Unit), formatSpread(rw.Lo, rw.Hi, r.Y.Unit), rw.Runs, ratioCell(rw))
		}
	}
	return tw.Flush()
}

// axisLabel is an axis' label with its unit: "time (s)".
func axisLabel(a result.Axis) string {
	if a.Unit == "" {
		return a.Label
	}
	return a.Label + " (" + a.Unit + ")"
}

// markdownTable writes r's table in Markdown: x (when r has one), series,
// median, spread, runs and the ratio to the baseline.
func markdownTable(w io.Writer, r *result.Result) {
	head := "| series | median | spread (min–max) | runs | ratio to " + cellText(r.Baseline, "–") + " |"
	rule := "|---|---:|---:|---:|---:|"
	if r.X.Label != "" {
		head = "| " + cellText(r.X.Label, "x") + " " + head
		rule = "|---:" + rule
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, rw := range rows(r) {
		line := fmt.Sprintf("| %s | %s | %s | %d | %s |", cellText(rw.Series, ""), formatValue(rw.Median, r.Y.Unit),
			formatSpread(rw.Lo, rw.Hi, r.Y.Unit), rw.Runs, ratioCell(rw))
		if r.X.Label != "" {
			line = "| " + tickLabel(rw.X) + " " + line
		}
		fmt.Fprintln(w, line)
	}
}

// cellText makes s safe inside a Markdown table cell, or empty when s is.
func cellText(s, empty string) string {
	if s == "" {
		return empty
	}
	return strings.ReplaceAll(s, "|", `\|`)
}
