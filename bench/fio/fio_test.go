package fio

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// jobs are a run of every kind the benchmarks use: reads and writes,
// random and sequential, at depth 1 and more.
var jobs = []Job{
	{Name: "randread-4k-qd1", RW: "randread", BS: "4k", Depth: 1},
	{Name: "randwrite-4k-qd8", RW: "randwrite", BS: "4k", Depth: 8},
	{Name: "read-1m-qd4", RW: "read", BS: "1m", Depth: 4},
	{Name: "write-1m-qd4", RW: "write", BS: "1m", Depth: 4},
}

// TestParseReadsEveryJob runs the real fio, with jobs of a fifth of a
// second, on a file of the test's, and reads every job's figures from its
// output.
func TestParseReadsEveryJob(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "fio.dat")
	if _, err := RunHost(ctx, FillArgs(file, 16<<20)); err != nil {
		t.Fatal(err)
	}
	out, err := RunHost(ctx, RunArgs(file, 16<<20, 0, 200*time.Millisecond, jobs))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(append([]byte("fio: a warning before the JSON\n"), out...), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		m := got[j.Name]
		if m.IOPS <= 0 || m.Bandwidth <= 0 || m.Mean <= 0 || m.P50 <= 0 || m.P99 < m.P50 || m.P99 > 1 {
			t.Errorf("%s: %+v, want positive IOPS, bandwidth and mean, and 0 < p50 <= p99 < 1 s", j.Name, m)
		}
	}
	// Without one of its jobs, the output is refused.
	cut := strings.Replace(string(out), `"jobname" : "`+jobs[2].Name+`"`, `"jobname" : "other"`, 1)
	if _, err := Parse([]byte(cut), jobs); err == nil {
		t.Errorf("Parse accepted output without job %s", jobs[2].Name)
	}
}

// TestJobTimesInMilliseconds: fio reads "0.5s" as 0 (it takes the
// integer before the point), so a job's times go to it in whole
// milliseconds, which it reads exactly.
func TestJobTimesInMilliseconds(t *testing.T) {
	args := RunArgs("/f", 1<<30, 500*time.Millisecond, 2*time.Second, jobs)
	for _, want := range []string{"--ramp_time=500ms", "--runtime=2000ms"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v: want %s", args, want)
		}
	}
}
