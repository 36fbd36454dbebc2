package main

import (
	"slices"
	"strings"
	"testing"
)

func TestFailuresRepeatsFailedTestsOnly(t *testing.T) {
	out := strings.Split(`ktest-init: running x.test -test.v
=== RUN   TestGood
    good_test.go:1: fine
--- PASS: TestGood (0.00s)
=== RUN   TestBad
    bad_test.go:9: the reason
--- FAIL: TestBad (1.00s)
=== RUN   TestParent
=== RUN   TestParent/sub
    p_test.go:3: sub broke
    --- FAIL: TestParent/sub (0.00s)
--- FAIL: TestParent (0.00s)
FAIL`, "\n")
	got := failures(out)
	for _, want := range []string{"    bad_test.go:9: the reason", "--- FAIL: TestBad (1.00s)", "    p_test.go:3: sub broke"} {
		if !slices.Contains(got, want) {
			t.Errorf("failures lacks %q; got:\n%s", want, strings.Join(got, "\n"))
		}
	}
	n := 0
	for _, l := range got {
		if l == "    p_test.go:3: sub broke" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("a subtest's line appears %d times, want once:\n%s", n, strings.Join(got, "\n"))
	}
	if slices.Contains(got, "    good_test.go:1: fine") {
		t.Errorf("failures repeats a passing test's output:\n%s", strings.Join(got, "\n"))
	}
}

func TestFailuresShowsTheTailWithoutAFailLine(t *testing.T) {
	var lines []string
	for i := range 100 {
		lines = append(lines, strings.Repeat("x", i))
	}
	lines = append(lines, "panic: test timed out after 10m0s")
	got := failures(lines)
	if len(got) == 0 || got[len(got)-1] != "panic: test timed out after 10m0s" {
		t.Fatalf("failures without a --- FAIL line should end with the output's last line, got %q", got)
	}
	if len(got) > maxFailureLines {
		t.Errorf("failures returned %d lines, over its bound of %d", len(got), maxFailureLines)
	}
}

func TestFailuresKeepsTheReasonBeforeALongDump(t *testing.T) {
	lines := []string{"=== RUN   TestCrash", "    crash_test.go:91: no kill landed in the middle of a deletion", "    crash_test.go:155: plinth-node log (tail):"}
	for i := range 200 {
		lines = append(lines, strings.Repeat("log ", i%7+1))
	}
	lines = append(lines, "--- FAIL: TestCrash (480.77s)")
	got := failures(lines)
	if !slices.Contains(got, "    crash_test.go:91: no kill landed in the middle of a deletion") {
		t.Errorf("the test's reason is not in the digest:\n%s", strings.Join(got, "\n"))
	}
	if got[len(got)-1] != "--- FAIL: TestCrash (480.77s)" {
		t.Errorf("the digest does not end with the verdict: %q", got[len(got)-1])
	}
}
