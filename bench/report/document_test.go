package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"source.plinth.dev/bench/result"
)

// TestWriteReport writes a report of two results and checks that every
// plot the Markdown links exists, that the raw results are kept beside
// them, and that the header, goals and notes are there.
func TestWriteReport(t *testing.T) {
	out := t.TempDir()
	r1 := fixture()
	r1.Goals = []string{"plinth within 1.2x of the floor"}
	r1.Notes = []string{"measured on a test cluster"}
	r2 := &result.Result{Name: "stats", Title: "Stats", Y: result.Axis{Label: "time", Unit: "s"},
		Series: []result.Series{{Name: "quota", Points: []result.Point{{Runs: []float64{2e-5}}}}}}
	rn := run{Date: "2026-01-02", Machine: machine{CPU: "Test CPU", Cores: 2, Memory: "1.00 GiB", Kernel: "6.1", Go: "go1.26", Commit: "abc"}, Quick: true}
	path, err := writeReport(out, rn, []*result.Result{r1, r2})
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(out, "2026-01-02.md") {
		t.Errorf("report at %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{"| CPU | Test CPU, 2 cores |", "| commit | abc |", "A quick run", "- plinth within 1.2x of the floor",
		"- measured on a test cluster", "| 100 | plinth | 31.0 s | 30.0–32.0 s | 3 | 1.55× |", "| quota | 20.0 µs | 20.0 µs | 1 | – |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	links := regexp.MustCompile(`!\[[^]]*\]\(([^)]+)\)`).FindAllStringSubmatch(md, -1)
	if len(links) != 2 {
		t.Fatalf("%d plot links, want 2", len(links))
	}
	for _, l := range links {
		if _, err := os.Stat(filepath.Join(out, l[1])); err != nil {
			t.Errorf("linked plot: %v", err)
		}
	}
	kept, err := result.ReadDir(filepath.Join(out, "2026-01-02"))
	if err != nil || len(kept) != 2 {
		t.Errorf("raw results kept beside the plots: %d, %v", len(kept), err)
	}
}

func TestProcField(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpuinfo")
	if err := os.WriteFile(p, []byte("processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\nmodel name\t: second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := procField(p, "model name"); err != nil || v != "Some CPU @ 2.0GHz" {
		t.Errorf("procField = %q, %v", v, err)
	}
	if _, err := procField(p, "MemTotal"); err == nil {
		t.Error("procField found a missing key")
	}
}

// TestCommitLine checks the report's commit: the run's first commit,
// with the tree's at the end when the two differ (a run of 2026-11-30 was
// stamped with a commit made during it, which none of its programs had
// been built from).
func TestCommitLine(t *testing.T) {
	for _, tc := range []struct {
		started, now string
		same         bool
		want         string
	}{
		{"", "abc", false, "abc"},
		{"abc", "abc", true, "abc"},
		{"abc + uncommitted changes", "abc + uncommitted changes", false, "abc + uncommitted changes"},
		{"abc", "def", false, "abc (the tree was def when the report was written; a program that built from it after the start measured that tree)"},
		{"abc", "def", true, "abc (the report was written at def, which differs from it only in bench/results)"},
	} {
		if got := commitLine(tc.started, tc.now, tc.same); got != tc.want {
			t.Errorf("commitLine(%q, %q, %v) = %q, want %q", tc.started, tc.now, tc.same, got, tc.want)
		}
	}
}

// TestSameCode checks, in a real repository, that commits differing only
// in bench/results hold the same code, as a run resumed after its first
// sitting's results were committed does, and that any other change, or a
// commit with uncommitted changes, does not.
func TestSameCode(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("no git:", err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(path, text string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("commit", "-q", "-m", path)
		return git("rev-parse", "HEAD")
	}
	git("init", "-q")
	first := commit("main.go", "package main\n")
	results := commit("bench/results/2026-11-30.md", "figures\n")
	code := commit("main.go", "package main // changed\n")
	ctx := context.Background()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{first, results, true},
		{first, code, false},
		{results, code, false},
		{first, first + " + uncommitted changes", false},
		{"", first, false},
	} {
		if got := sameCode(ctx, tc.a, tc.b); got != tc.want {
			t.Errorf("sameCode(%.7s, %.7s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	// treeCommit leaves out bench/results too.
	if err := os.WriteFile("bench/results/2026-12-01.md", []byte("more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := treeCommit(ctx); err != nil || got != code {
		t.Errorf("treeCommit with a new results file = %q, %v; want %s", got, err, code)
	}
	if err := os.WriteFile("main.go", []byte("package main // edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := treeCommit(ctx); err != nil || got != code+" + uncommitted changes" {
		t.Errorf("treeCommit with main.go edited = %q, %v; want the changes named", got, err)
	}
}
