// Package result is the common form of a benchmark's measurements in
// `make bench`: each measuring program (a cluster benchmark, or the
// conversion of `go test -bench` output) writes one Result per benchmark
// as JSON into the run's results directory, and the report renders every
// Result found there as a table row set and a plot. Keeping the form in one
// place lets programs that measure very different things (pods to Running,
// RSS per claim, API server CPU) share one table, one plot style and one
// way of computing medians, spreads and ratios.
package result

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// Result is one benchmark: one or more series of points, each point the
// raw values of every run at one x.
type Result struct {
	// Name is the file stem and the plot's name: lower case, digits and
	// dashes.
	Name string `json:"name"`
	// Title heads the benchmark's section of the report.
	Title string `json:"title"`
	// X labels the x axis ("claims (N)"); empty for a benchmark measured
	// at a single x, whose points all have X 0.
	X Axis `json:"x"`
	// Y labels the measured value and gives its unit ("s", "MiB", "ms").
	Y Axis `json:"y"`
	// Baseline names the series every other series is compared with at the
	// same x (ratio of medians); empty: no ratios.
	Baseline string `json:"baseline,omitempty"`
	// Series are the measured implementations or settings.
	Series []Series `json:"series"`
	// Goals are the promises the figures are read against, in words
	// ("plinth within 1.2x of emptyDir at every N"); a benchmark never
	// asserts them, the report shows them beside the numbers.
	Goals []string `json:"goals,omitempty"`
	// Notes are what the reader needs to interpret the figures: the setup,
	// what was measured from where, anything unusual in this run.
	Notes []string `json:"notes,omitempty"`
}

// Axis names an axis and its unit.
type Axis struct {
	Label string `json:"label"`
	Unit  string `json:"unit,omitempty"`
}

// Series is one implementation or setting measured at several x.
type Series struct {
	Name   string  `json:"name"`
	Points []Point `json:"points"`
}

// Point is every run's value at one x.
type Point struct {
	X    float64   `json:"x"`
	Runs []float64 `json:"runs"`
}

var namePattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Validate reports what makes r unusable for the report: a bad name, no
// series, a point without runs, or a baseline that is not one of the
// series.
func (r *Result) Validate() error {
	if !namePattern.MatchString(r.Name) {
		return fmt.Errorf("result name %q: want lower case letters, digits and dashes", r.Name)
	}
	if len(r.Series) == 0 {
		return fmt.Errorf("result %s: no series", r.Name)
	}
	seen := map[string]bool{}
	for _, s := range r.Series {
		if s.Name == "" || seen[s.Name] {
			return fmt.Errorf("result %s: series name %q empty or repeated", r.Name, s.Name)
		}
		seen[s.Name] = true
		for _, p := range s.Points {
			if len(p.Runs) == 0 {
				return fmt.Errorf("result %s: series %s has no runs at x=%g", r.Name, s.Name, p.X)
			}
		}
	}
	if r.Baseline != "" && !seen[r.Baseline] {
		return fmt.Errorf("result %s: baseline %q is not a series", r.Name, r.Baseline)
	}
	return nil
}

// Write validates r and writes it to dir/<name>.json.
func Write(dir string, r *Result) error {
	if err := r.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding result %s: %w", r.Name, err)
	}
	path := filepath.Join(dir, r.Name+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing result %s: %w", r.Name, err)
	}
	return nil
}

// ReadDir reads every *.json Result in dir, sorted by name.
func ReadDir(dir string) ([]*Result, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Result
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading result: %w", err)
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("decoding result %s: %w", p, err)
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("result %s: %w", p, err)
		}
		out = append(out, &r)
	}
	slices.SortFunc(out, func(a, b *Result) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// Median is the median of runs (the mean of the middle two for an even
// count); NaN-free input is assumed.
func Median(runs []float64) float64 {
	if len(runs) == 0 {
		return 0
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Spread is the smallest and largest of runs.
func Spread(runs []float64) (lo, hi float64) {
	if len(runs) == 0 {
		return 0, 0
	}
	return slices.Min(runs), slices.Max(runs)
}

// MedianInterval is a distribution-free confidence interval for the
// median of the population runs were drawn from: the k-th smallest and
// k-th largest run, for the largest k whose interval holds the median with
// probability at least level (each run falls below the median with
// probability one half, so the count below it is binomial). Few runs
// cannot reach level: then the interval is the smallest and largest run
// and covered says the probability it does reach. Unlike Spread, it
// narrows as runs are added, so that a goal a little below the median is
// shown met by enough runs rather than never.
func MedianInterval(runs []float64, level float64) (lo, hi, covered float64) {
	n := len(runs)
	if n == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	// below[j] is the probability that at most j of the n runs fall
	// below the median.
	below := make([]float64, n+1)
	term, sum := math.Pow(0.5, float64(n)), 0.0
	for j := 0; j <= n; j++ {
		sum += term
		below[j] = sum
		term = term * float64(n-j) / float64(j+1)
	}
	k := 1
	for k+1 <= (n+1)/2 && 1-2*below[k] >= level {
		k++
	}
	return s[k-1], s[n-k], 1 - 2*below[k-1]
}
