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

// The reasons a test logged come last, after a long dump that follows
// them (a process's log tail, logged by a cleanup), so that the bounded
// tail a CI log shows holds them: a multi-line message whole, up to
// maxMessageLines.
func TestFailuresEndsWithTheReasons(t *testing.T) {
	lines := []string{
		"=== RUN   TestCrash",
		"    crash_test.go:83: after settling, invariant violations:",
		"        claim c1 is Pending",
		"        claim c2 is Pending",
		"    process.go:115: plinth-node log (tail):",
	}
	for i := range 200 {
		lines = append(lines, "        log "+strings.Repeat("x", i%7+1))
	}
	lines = append(lines, "--- FAIL: TestCrash (480.77s)")
	got := failures(lines)
	want := []string{
		"    crash_test.go:83: after settling, invariant violations:",
		"        claim c1 is Pending",
		"        claim c2 is Pending",
		"--- FAIL: TestCrash (480.77s)",
	}
	if len(got) < len(want) || !slices.Equal(got[len(got)-len(want):], want) {
		t.Errorf("the digest does not end with the reason and the verdict:\n%s", strings.Join(got, "\n"))
	}
	if !slices.Contains(got, lines[len(lines)-2]) {
		t.Errorf("the digest lacks the last lines before the verdict:\n%s", strings.Join(got, "\n"))
	}
	if len(got) > maxFailureLines {
		t.Errorf("failures returned %d lines, over its bound of %d", len(got), maxFailureLines)
	}

	long := []string{"=== RUN   TestMany", "    many_test.go:1: violations:"}
	for i := range 100 {
		long = append(long, "        violation "+strings.Repeat("v", i+1))
	}
	long = append(long, "    many_test.go:2: second reason", "--- FAIL: TestMany (1.00s)")
	got = failures(long)
	n := 0
	for _, l := range got {
		if strings.HasPrefix(l, "        violation ") {
			n++
		}
	}
	if n != maxMessageLines-1 || !slices.Contains(got, "        ... (89 more lines)") || !slices.Contains(got, "    many_test.go:2: second reason") {
		t.Errorf("a long message should be cut to %d lines and keep the next one; got %d of its lines:\n%s", maxMessageLines, n, strings.Join(got, "\n"))
	}
}
