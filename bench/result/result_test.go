package result

import (
	"math"
	"testing"
)

func TestMedianAndSpread(t *testing.T) {
	for _, tc := range []struct {
		runs        []float64
		med, lo, hi float64
	}{
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
		{[]float64{7}, 7, 7, 7},
	} {
		if m := Median(tc.runs); m != tc.med {
			t.Errorf("Median(%v) = %g, want %g", tc.runs, m, tc.med)
		}
		if lo, hi := Spread(tc.runs); lo != tc.lo || hi != tc.hi {
			t.Errorf("Spread(%v) = %g, %g, want %g, %g", tc.runs, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestWriteReadDir(t *testing.T) {
	dir := t.TempDir()
	r := &Result{
		Name: "provisioning", Title: "t", X: Axis{Label: "N"}, Y: Axis{Label: "time", Unit: "s"},
		Baseline: "floor",
		Series: []Series{
			{Name: "floor", Points: []Point{{X: 50, Runs: []float64{1, 2}}}},
			{Name: "plinth", Points: []Point{{X: 50, Runs: []float64{2, 3}}}},
		},
	}
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "provisioning" || got[0].Series[1].Points[0].Runs[1] != 3 {
		t.Fatalf("read back %+v", got)
	}
}

func TestValidateRefuses(t *testing.T) {
	ok := func() *Result {
		return &Result{Name: "a-b", Series: []Series{{Name: "x", Points: []Point{{X: 1, Runs: []float64{1}}}}}}
	}
	for name, change := range map[string]func(*Result){
		"bad name":         func(r *Result) { r.Name = "../x" },
		"no series":        func(r *Result) { r.Series = nil },
		"no runs":          func(r *Result) { r.Series[0].Points[0].Runs = nil },
		"missing baseline": func(r *Result) { r.Baseline = "y" },
		"repeated series":  func(r *Result) { r.Series = append(r.Series, r.Series[0]) },
	} {
		r := ok()
		change(r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, r)
		}
	}
	if err := ok().Validate(); err != nil {
		t.Errorf("valid result refused: %v", err)
	}
}

// TestMedianInterval: the interval is the order statistics the binomial
// law names (known values: 20 runs give the 6th and 15th at 95.9%), it
// narrows as runs are added, and few runs give the whole spread with the
// lower coverage they reach.
func TestMedianInterval(t *testing.T) {
	runs := func(n int) []float64 {
		var r []float64
		for i := n; i >= 1; i-- {
			r = append(r, float64(i))
		}
		return r
	}
	for _, tc := range []struct {
		n               int
		lo, hi, covered float64
	}{
		{5, 1, 5, 0.9375},
		{6, 1, 6, 0.96875},
		{20, 6, 15, 0.9586},
		{1, 1, 1, 0},
	} {
		lo, hi, covered := MedianInterval(runs(tc.n), 0.95)
		if lo != tc.lo || hi != tc.hi || math.Abs(covered-tc.covered) > 5e-5 {
			t.Errorf("MedianInterval(1..%d, 0.95) = [%g, %g] at %.4f, want [%g, %g] at %.4f", tc.n, lo, hi, covered, tc.lo, tc.hi, tc.covered)
		}
	}
	if lo, hi, c := MedianInterval(nil, 0.95); lo != 0 || hi != 0 || c != 0 {
		t.Errorf("MedianInterval(nil) = [%g, %g] at %g, want zeros", lo, hi, c)
	}
}
