// Command report renders the results of `make bench`: every benchmark's
// result.Result in a results directory becomes one table printed to stdout
// and a Markdown report with a PNG plot per benchmark, and it turns the
// output of the Go benchmarks into such results first.
//
//	report -from-gotest FILE -results DIR    convert go test -bench output
//	report -results DIR [-out bench/results] [-date YYYY-MM-DD] [-quick] [-commit C]
//
// The report goes to OUT/<date>.md, its plots and a copy of the results to
// OUT/<date>/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"source.plinth.dev/bench/result"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := runReport(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func runReport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	gotest := fs.String("from-gotest", "", "convert this go test -bench output (benchstat format) into results in -results, and stop")
	results := fs.String("results", "", "the directory of result JSON files (required)")
	out := fs.String("out", "bench/results", "where the report goes: OUT/<date>.md and OUT/<date>/")
	date := fs.String("date", time.Now().UTC().Format(time.DateOnly), "the run's date, the report's name")
	quick := fs.Bool("quick", false, "the run was a quick one (BENCH_QUICK=1); the report says so")
	commit := fs.String("commit", "", "the commit the run measured, as bench.sh read it when it started (git rev-parse HEAD, and \" + uncommitted changes\" if the tree differed); empty: the tree as it is now")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *results == "" || fs.NArg() > 0 {
		return errors.New("usage: report -from-gotest FILE -results DIR | report -results DIR [-out DIR] [-date D] [-quick] [-commit C]")
	}
	if *gotest != "" {
		return convert(*gotest, *results)
	}
	if _, err := time.Parse(time.DateOnly, *date); err != nil {
		return fmt.Errorf("-date: %w", err)
	}
	rs, err := result.ReadDir(*results)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return fmt.Errorf("no results in %s", *results)
	}
	if err := writeText(os.Stdout, rs); err != nil {
		return err
	}
	path, err := writeReport(*out, run{Date: *date, Machine: describeMachine(ctx, *commit), Quick: *quick}, rs)
	if err != nil {
		return err
	}
	fmt.Printf("\nreport: %s (plots and results in %s/)\n", path, path[:len(path)-len(".md")])
	return nil
}

// convert writes the results of the Go benchmarks in go test output file
// into dir.
func convert(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("go test output: %w", err)
	}
	defer f.Close()
	lines, err := parseGoTest(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	rs, err := fromGoTest(lines, goSpecs)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range rs {
		if err := result.Write(dir, r); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "report: %d benchmark lines from %s became %d results in %s\n", len(lines), file, len(rs), dir)
	return nil
}
