package main

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"

	"source.plinth.dev/bench/result"
)

// fixture: two series at two x, the baseline listed second, and a point of
// "plinth" at an x where the baseline has none.
func fixture() *result.Result {
	return &result.Result{
		Name: "provisioning", Title: "Claims to Running", X: result.Axis{Label: "claims"},
		Y: result.Axis{Label: "time", Unit: "s"}, Baseline: "floor",
		Series: []result.Series{
			{Name: "plinth", Points: []result.Point{
				{X: 100, Runs: []float64{30, 32, 31}},
				{X: 50, Runs: []float64{12, 14, 13, 15}},
				{X: 200, Runs: []float64{64}},
			}},
			{Name: "floor", Points: []result.Point{
				{X: 50, Runs: []float64{10, 10, 11}},
				{X: 100, Runs: []float64{20, 25, 18}},
			}},
		},
	}
}

func TestRowsRatiosOfMedians(t *testing.T) {
	got := rows(fixture())
	type want struct {
		x                  float64
		series             string
		median, lo, hi     float64
		runs               int
		baseline, hasRatio bool
		ratio              float64
	}
	wants := []want{
		{50, "plinth", 13.5, 12, 15, 4, false, true, 13.5 / 10},
		{50, "floor", 10, 10, 11, 3, true, true, 1},
		{100, "plinth", 31, 30, 32, 3, false, true, 31.0 / 20},
		{100, "floor", 20, 18, 25, 3, true, true, 1},
		{200, "plinth", 64, 64, 64, 1, false, false, 0},
	}
	if len(got) != len(wants) {
		t.Fatalf("rows: %+v, want %d rows", got, len(wants))
	}
	for i, w := range wants {
		g := got[i]
		if g.X != w.x || g.Series != w.series || g.Median != w.median || g.Lo != w.lo || g.Hi != w.hi ||
			g.Runs != w.runs || g.Baseline != w.baseline || g.HasRatio != w.hasRatio || math.Abs(g.Ratio-w.ratio) > 1e-12 {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	r := fixture()
	r.Baseline = ""
	for _, rw := range rows(r) {
		if rw.HasRatio || rw.Baseline {
			t.Errorf("without a baseline, row %+v has a ratio", rw)
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{formatValue(0.000420, "s"), "420 µs"},
		{formatValue(0.0123, "s"), "12.3 ms"},
		{formatValue(64, "s"), "64.0 s"},
		{formatValue(6.1e-7, "s"), "610 ns"},
		{formatValue(1536, "B"), "1.50 KiB"},
		{formatValue(3.5, "claims/s"), "3.50 claims/s"},
		{formatValue(7, ""), "7.00"},
		{formatSpread(0.00102, 0.0011, "s"), "1.02–1.10 ms"},
		{formatSpread(0.000998, 0.00102, "s"), "998 µs – 1.02 ms"},
		{formatSpread(2, 2, "s"), "2.00 s"},
		{formatRatio(1.183), "1.18×"},
		{formatRatio(12.5), "12.5×"},
		{formatRatio(1.0 / 2500), "1/2500×"},
		{formatRatio(0.25), "0.250×"},
		{formatNumber(0.0042), "0.0042"},
		{tickLabel(50), "50"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestTables(t *testing.T) {
	var md bytes.Buffer
	markdownTable(&md, fixture())
	want := "| claims | series | median | spread (min–max) | runs | ratio to floor |\n" +
		"|---:|---|---:|---:|---:|---:|\n" +
		"| 50 | plinth | 13.5 s | 12.0–15.0 s | 4 | 1.35× |\n" +
		"| 50 | floor | 10.0 s | 10.0–11.0 s | 3 | baseline |\n" +
		"| 100 | plinth | 31.0 s | 30.0–32.0 s | 3 | 1.55× |\n" +
		"| 100 | floor | 20.0 s | 18.0–25.0 s | 3 | baseline |\n" +
		"| 200 | plinth | 64.0 s | 64.0 s | 1 | – |\n"
	if md.String() != want {
		t.Errorf("markdown table:\n%s\nwant:\n%s", md.String(), want)
	}
	var text bytes.Buffer
	if err := writeText(&text, []*result.Result{fixture()}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "benchmark") ||
		!strings.Contains(lines[3], "31.0 s") || !strings.HasSuffix(lines[3], "1.55×") {
		t.Errorf("text table:\n%s", text.String())
	}
}

// TestPlotIsPNG draws the fixture and a single-x result and decodes them.
func TestPlotIsPNG(t *testing.T) {
	single := &result.Result{Name: "stats", Title: "stats", Y: result.Axis{Label: "time", Unit: "s"}, Baseline: "walk",
		Series: []result.Series{
			{Name: "walk", Points: []result.Point{{Runs: []float64{0.5, 0.52}}}},
			{Name: "quota", Points: []result.Point{{Runs: []float64{2e-5, 2.1e-5}}}},
		}}
	for _, r := range []*result.Result{fixture(), single} {
		var b bytes.Buffer
		if err := writePlot(&b, r); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&b)
		if err != nil {
			t.Fatalf("plot %s does not decode as PNG: %v", r.Name, err)
		}
		if got := img.Bounds().Size(); got.X != 768 || got.Y != 480 {
			t.Errorf("plot %s is %v pixels, want 768x480", r.Name, got)
		}
	}
}
