package ktest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResultLine(t *testing.T) {
	for _, tc := range []struct {
		line  string
		code  int
		found bool
	}{
		{ResultLine("n0nce", 0), 0, true},
		{"[  5.1] " + ResultLine("n0nce", 3) + "\r", 3, true},
		// A test printing a result line cannot fake one: it does not
		// know the nonce.
		{ResultLine("other", 0), 0, false},
		{"KTEST-RESULT n0nce exit=", 0, false},
		{"ok  \tsome/pkg", 0, false},
	} {
		code, ok := ParseResult(tc.line, "n0nce")
		if ok != tc.found || code != tc.code {
			t.Errorf("ParseResult(%q) = %d, %v; want %d, %v", tc.line, code, ok, tc.code, tc.found)
		}
	}
}

func TestPackageLine(t *testing.T) {
	name, code, ok := ParsePackage("[  3.2] "+PackageLine("n0nce", "pkg_loop.test", 2), "n0nce")
	if !ok || name != "pkg_loop.test" || code != 2 {
		t.Errorf("ParsePackage = %q, %d, %v; want pkg_loop.test, 2, true", name, code, ok)
	}
	if _, _, ok := ParsePackage(PackageLine("other", "x.test", 0), "n0nce"); ok {
		t.Error("ParsePackage accepted a line with another nonce")
	}
}

func TestSkippedTest(t *testing.T) {
	for _, tc := range []struct {
		line, name string
		ok         bool
	}{
		{"--- SKIP: TestQuota (0.00s)", "TestQuota", true},
		{"    --- SKIP: TestQuota/fs=xfs (0.01s)", "TestQuota/fs=xfs", true},
		{"--- SKIP: BenchmarkCreateRemove/existing=0/impl=losetup", "BenchmarkCreateRemove/existing=0/impl=losetup", true},
		{"--- PASS: TestQuota (0.00s)", "", false},
		{"    quota_test.go:12: --- SKIP: quoted in a log line", "", false},
	} {
		name, ok := SkippedTest(tc.line)
		if name != tc.name || ok != tc.ok {
			t.Errorf("SkippedTest(%q) = %q, %v; want %q, %v", tc.line, name, ok, tc.name, tc.ok)
		}
	}
}

// TestRunTestSkips runs this test binary the way the VM's init runs a
// kernel test binary, selecting one subtest of TestSkipHelper each time,
// and checks the verdict: a surprise skip fails the binary, a skip
// declared with SkipExpected does not.
func TestRunTestSkips(t *testing.T) {
	if InVM() {
		t.Fatal("this test starts itself as if in the VM; it must run on the host")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sub  string
		want int
	}{
		{"passes", 0},
		{"declared", 0},
		{"surprise", ExitSkip},
		{"declared-and-surprise", ExitSkip},
		{"fails", 1},
	} {
		got := runTest(exe, Config{Args: []string{"-test.run=^TestSkipHelper$/^" + tc.sub + "$"}}, t.TempDir())
		if got != tc.want {
			t.Errorf("subtest %s: runTest exit %d, want %d", tc.sub, got, tc.want)
		}
	}
}

// TestRunTestRanNothing: a binary whose runner-chosen pattern (the VM's
// per-package test list) matches no test fails, as a renamed test would
// otherwise pass unnoticed; the same pattern given by the user (a run of
// a few tests across packages) passes.
func TestRunTestRanNothing(t *testing.T) {
	if InVM() {
		t.Fatal("this test starts itself as if in the VM; it must run on the host")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The binary's own "no tests to run" would reach go test's output
	// and make it report this package as having run none.
	console, err := os.Create(filepath.Join(t.TempDir(), "console"))
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = console
	defer func() { os.Stdout = stdout; console.Close() }()
	chosen := func(pattern string) Config {
		return Config{TestArgs: map[string][]string{filepath.Base(exe): {"-test.run=" + pattern}}}
	}
	for _, tc := range []struct {
		what string
		cfg  Config
		want int
	}{
		{"runner's pattern matching a test", chosen("^TestSkipHelper$/^passes$"), 0},
		{"runner's pattern matching nothing", chosen("^TestRenamedAway$"), ExitRanNothing},
		{"user's pattern matching nothing", Config{Args: []string{"-test.run=^TestRenamedAway$"}}, 0},
	} {
		if got := runTest(exe, tc.cfg, t.TempDir()); got != tc.want {
			t.Errorf("%s: runTest exit %d, want %d", tc.what, got, tc.want)
		}
	}
}

// TestStartedTest: only a top-level test's start counts.
func TestStartedTest(t *testing.T) {
	for line, want := range map[string]bool{
		"=== RUN   TestQuota":                  true,
		"=== RUN   TestQuota/fs=xfs":           false,
		"=== RUN   BenchmarkCreate":            false,
		"    x_test.go:3: === RUN   TestQuota": false,
	} {
		if got := StartedTest(line); got != want {
			t.Errorf("StartedTest(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestSkipHelper holds what TestRunTestSkips runs. It does nothing unless
// started by runTest, which marks its children as running in the VM.
func TestSkipHelper(t *testing.T) {
	if !InVM() {
		return
	}
	t.Run("passes", func(t *testing.T) {})
	t.Run("declared", func(t *testing.T) { SkipExpected(t, "this test is made to skip") })
	t.Run("surprise", func(t *testing.T) { t.Skip("nothing declared") })
	t.Run("declared-and-surprise", func(t *testing.T) {
		t.Run("a", func(t *testing.T) { SkipExpected(t, "declared") })
		t.Run("b", func(t *testing.T) { t.Skip("not declared") })
	})
	t.Run("fails", func(t *testing.T) { t.Error("made to fail") })
}
