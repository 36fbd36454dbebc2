package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"source.plinth.dev/bench/result"
)

// The size of every plot: 8 × 5 inches at 96 dots per inch, 768 × 480
// pixels, legible in a README without zooming.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
	plotDPI    = 96
)

// medianErrs are one series' points for the plot: medians as y, the
// distance down to the smallest and up to the largest run as errors.
type medianErrs struct {
	plotter.XYs
	plotter.YErrors
}

// writePlot draws r as a PNG: per series its medians as markers joined by a
// line, with error bars from the smallest to the largest run. A benchmark
// measured at one x has its series side by side on a nominal axis instead.
// Values in seconds or bytes are drawn in the unit their smallest median
// reads best in; when the medians span more than a factor of 50 the y axis
// is logarithmic, so that a baseline 1000 times slower leaves the fast
// series visible.
func writePlot(w io.Writer, r *result.Result) error {
	p := plot.New()
	p.Title.Text = r.Title
	p.BackgroundColor = color.White
	p.Legend.Top = true

	rs := rows(r)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, rw := range rs {
		lo, hi = math.Min(lo, rw.Median), math.Max(hi, rw.Median)
	}
	unit, size := scaleFor(lo, r.Y.Unit)
	p.Y.Label.Text = axisLabel(result.Axis{Label: r.Y.Label, Unit: unit})
	// The top of the y axis leaves room for the legend above the data.
	lo, hi = lo/size, hi/size
	for _, rw := range rs {
		hi = math.Max(hi, rw.Hi/size)
		lo = math.Min(lo, rw.Lo/size)
	}
	if lo > 0 && hi/lo > 50 {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = lo/1.5, hi*4
	} else {
		p.Y.Min, p.Y.Max = 0, hi*1.3
	}

	nominal := r.X.Label == ""
	var xs []float64
	for _, rw := range rs {
		if !slices.Contains(xs, rw.X) {
			xs = append(xs, rw.X)
		}
	}
	// Series at the same x are drawn a little apart, so that their error
	// bars do not hide each other.
	step := 0.0
	if len(xs) > 1 {
		step = (xs[len(xs)-1] - xs[0]) / 80
	}
	var names []string
	for i, s := range r.Series {
		var pts medianErrs
		points := slices.Clone(s.Points)
		slices.SortFunc(points, func(a, b result.Point) int { return cmpFloat(a.X, b.X) })
		for _, pt := range points {
			med := result.Median(pt.Runs) / size
			mn, mx := result.Spread(pt.Runs)
			x := pt.X + (float64(i)-float64(len(r.Series)-1)/2)*step
			if nominal {
				x = float64(len(names))
			}
			pts.XYs = append(pts.XYs, plotter.XY{X: x, Y: med})
			pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{med - mn/size, mx/size - med})
		}
		if len(pts.XYs) == 0 {
			continue
		}
		col := plotutil.Color(i)
		sc, err := plotter.NewScatter(pts.XYs)
		if err != nil {
			return fmt.Errorf("plot %s, series %s: %w", r.Name, s.Name, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(3.5), Shape: plotutil.Shape(i)}
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return fmt.Errorf("plot %s, series %s: %w", r.Name, s.Name, err)
		}
		bars.LineStyle.Color = col
		p.Add(bars, sc)
		if !nominal && len(pts.XYs) > 1 {
			line, err := plotter.NewLine(pts.XYs)
			if err != nil {
				return fmt.Errorf("plot %s, series %s: %w", r.Name, s.Name, err)
			}
			line.LineStyle.Color = col
			line.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			p.Add(line)
		}
		if !nominal {
			p.Legend.Add(s.Name, sc)
		}
		names = append(names, s.Name)
	}
	if nominal {
		// The axis names the series; no legend needed.
		p.NominalX(names...)
		p.X.Min, p.X.Max = -0.7, float64(len(names))-0.3
	} else {
		p.X.Label.Text = axisLabel(r.X)
		pad := math.Max(step*4, 0.5)
		p.X.Min, p.X.Max = xs[0]-pad, xs[len(xs)-1]+pad
		p.X.Tick.Marker = valueTicks(xs)
	}
	c := vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))
	p.Draw(draw.New(c))
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(w); err != nil {
		return fmt.Errorf("plot %s: %w", r.Name, err)
	}
	return nil
}

// valueTicks marks exactly the measured x values (N = 50, 100, 200), not
// round numbers between them.
type valueTicks []float64

func (v valueTicks) Ticks(_, _ float64) []plot.Tick {
	var t []plot.Tick
	for _, x := range v {
		t = append(t, plot.Tick{Value: x, Label: tickLabel(x)})
	}
	return t
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// logTicks marks a logarithmic axis at 1, 2 and 5 times each power of ten
// (labelled), with unlabelled minor ticks between: plot.LogTicks labels the
// powers of ten only, which leaves a range of one decade unreadable.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var t []plot.Tick
	labelled := []int{1, 2, 5}
	if hi/lo > 1000 {
		labelled = []int{1}
	}
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for m := 1; m < 10; m++ {
			v := d * float64(m)
			if v < lo || v > hi {
				continue
			}
			label := ""
			if slices.Contains(labelled, m) {
				label = tickLabel(v)
			}
			t = append(t, plot.Tick{Value: v, Label: label})
		}
	}
	return t
}

// tickLabel is formatNumber without trailing zeros: 50, not 50.0.
func tickLabel(v float64) string {
	s := formatNumber(v)
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	return s
}
