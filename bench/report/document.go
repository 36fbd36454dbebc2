package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"source.plinth.dev/bench/result"
)

// run is one `make bench` as the report describes it.
type run struct {
	Date    string // YYYY-MM-DD, the name of the report and its directory
	Machine machine
	// Quick says the run was a smoke test (BENCH_QUICK=1): one run per
	// figure, smaller sizes; its header says not to compare it.
	Quick bool
}

// writeMarkdown writes the report of results: the header, then per
// benchmark its title, goals, table, plot (from dir <date>/) and notes.
func writeMarkdown(w io.Writer, rn run, results []*result.Result) {
	fmt.Fprintf(w, "# Benchmarks, %s\n\n", rn.Date)
	if rn.Quick {
		fmt.Fprint(w, "**A quick run (BENCH_QUICK=1): one run per figure and smaller sizes, to check that every benchmark works. Not for comparison.**\n\n")
	}
	fmt.Fprint(w, "Written by `make bench` (build/scripts/bench.sh, bench/report). Each figure is the median of its runs, "+
		"with the smallest and largest run as its spread; the ratio is of medians, against the benchmark's baseline "+
		"measured in the same run at the same x. A benchmark never asserts a time: the goals are read against the table.\n\n")
	m := rn.Machine
	fmt.Fprintln(w, "| | |\n|---|---|")
	fmt.Fprintf(w, "| date | %s |\n", rn.Date)
	fmt.Fprintf(w, "| CPU | %s, %d cores |\n", cellText(m.CPU, "unknown"), m.Cores)
	fmt.Fprintf(w, "| memory | %s |\n", m.Memory)
	fmt.Fprintf(w, "| kernel | %s |\n", cellText(m.Kernel, "unknown"))
	fmt.Fprintf(w, "| Go | %s |\n", m.Go)
	fmt.Fprintf(w, "| commit | %s |\n\n", m.Commit)
	fmt.Fprintf(w, "Raw runs: [%s/](%s/) (one JSON per benchmark, bench/result's form).\n\n", rn.Date, rn.Date)
	for _, r := range results {
		fmt.Fprintf(w, "- [%s](#%s)\n", r.Title, r.Name)
	}
	for _, r := range results {
		fmt.Fprintf(w, "\n<a id=%q></a>\n## %s\n\n", r.Name, cellText(r.Title, r.Name))
		if len(r.Goals) > 0 {
			fmt.Fprintln(w, "Goals:")
			for _, g := range r.Goals {
				fmt.Fprintf(w, "- %s\n", g)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s", axisLabel(r.Y))
		if r.X.Label != "" {
			fmt.Fprintf(w, " by %s", axisLabel(r.X))
		}
		fmt.Fprint(w, ":\n\n")
		markdownTable(w, r)
		fmt.Fprintf(w, "\n![%s](%s/%s.png)\n", r.Title, rn.Date, r.Name)
		if len(r.Notes) > 0 {
			fmt.Fprintln(w, "\nNotes:")
			for _, n := range r.Notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
	}
}

// writeReport writes out/<date>.md, and into out/<date>/ a PNG and a copy of
// the JSON of every result, so that the committed run keeps its raw runs.
func writeReport(out string, rn run, results []*result.Result) (string, error) {
	dir := filepath.Join(out, rn.Date)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("report directory: %w", err)
	}
	for _, r := range results {
		var png bytes.Buffer
		if err := writePlot(&png, r); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, r.Name+".png"), png.Bytes(), 0o644); err != nil {
			return "", fmt.Errorf("writing plot: %w", err)
		}
		if err := result.Write(dir, r); err != nil {
			return "", err
		}
	}
	var md bytes.Buffer
	writeMarkdown(&md, rn, results)
	path := filepath.Join(out, rn.Date+".md")
	if err := os.WriteFile(path, md.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("writing report: %w", err)
	}
	return path, nil
}
