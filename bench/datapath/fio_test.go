package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseRoundReadsEveryWorkload runs a round of the real fio, with
// jobs of a few tenths of a second, on a file of the test's, and reads
// every workload's figures from its output.
func TestParseRoundReadsEveryWorkload(t *testing.T) {
	file := filepath.Join(t.TempDir(), fileName)
	if _, err := runHostForTest(fillArgs(file, 16<<20)); err != nil {
		t.Fatal(err)
	}
	out, err := runHostForTest(roundArgs(file, 16<<20, timing{ramp: 0, runtime: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseRound(append([]byte("fio: a warning before the JSON\n"), out...))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workloads {
		m := got[w.name]
		if m.iops <= 0 || m.bandwidth <= 0 || m.p50 <= 0 || m.p99 < m.p50 || m.p99 > 1 {
			t.Errorf("%s: %+v, want positive IOPS and bandwidth and 0 < p50 <= p99 < 1 s", w.name, m)
		}
	}
	// Without one of its jobs, the output is refused.
	cut := strings.Replace(string(out), `"jobname" : "`+workloads[2].name+`"`, `"jobname" : "other"`, 1)
	if _, err := parseRound([]byte(cut)); err == nil {
		t.Errorf("parseRound accepted output without job %s", workloads[2].name)
	}
}

func runHostForTest(args []string) ([]byte, error) {
	return runHost(context.Background(), args)
}

// TestJobTimesInMilliseconds: fio reads "0.5s" as 0 (it takes the
// integer before the point), so a job's times go to it in whole
// milliseconds, which it reads exactly.
func TestJobTimesInMilliseconds(t *testing.T) {
	args := roundArgs("/f", fileSize, timing{ramp: 500 * time.Millisecond, runtime: 2 * time.Second})
	for _, want := range []string{"--ramp_time=500ms", "--runtime=2000ms"} {
		if !containsArg(args, want) {
			t.Errorf("args %v: want %s", args, want)
		}
	}
}
