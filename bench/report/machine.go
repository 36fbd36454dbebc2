package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// machine is what the report's header says about where the figures were
// measured: the same benchmarks on another machine give other numbers, so
// a table without it cannot be compared with anything.
type machine struct {
	CPU    string // model name
	Cores  int
	Memory string // total, "7.8 GiB"
	Kernel string
	Go     string
	Commit string // git commit, "+ changes" when the tree differs from it
}

// describeMachine reads the machine's description from /proc and git. A
// figure it cannot find reads "unknown" with the reason: the report is
// still worth having without it. started is the commit the run began at
// (bench.sh reads it before building anything), or "" for the tree now.
func describeMachine(ctx context.Context, started string) machine {
	m := machine{CPU: "unknown", Memory: "unknown", Kernel: "unknown", Commit: "unknown",
		Cores: runtime.NumCPU(), Go: runtime.Version()}
	if v, err := procField("/proc/cpuinfo", "model name"); err == nil {
		m.CPU = v
	} else {
		m.CPU = "unknown (" + err.Error() + ")"
	}
	if v, err := procField("/proc/meminfo", "MemTotal"); err == nil {
		// "16318396 kB"
		if kb, err := strconv.ParseFloat(strings.Fields(v)[0], 64); err == nil {
			m.Memory = formatValue(kb*1024, "B")
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if now, err := treeCommit(ctx); err == nil {
		m.Commit = commitLine(started, now, sameCode(ctx, started, now))
	}
	return m
}

// resultsPathspec leaves out bench/results, where a run's own reports and
// an earlier sitting's go: they are not what a run measures.
const resultsPathspec = ":(exclude)bench/results"

// treeCommit is the tree's commit as bench.sh reads it: HEAD, and
// " + uncommitted changes" when the tree outside bench/results differs
// from it (untracked files count too: a new benchmark not yet committed
// changes what was measured).
func treeCommit(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", err
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--", ".", resultsPathspec).Output(); err == nil && len(st) > 0 {
		c += " + uncommitted changes"
	}
	return c, nil
}

// sameCode tells whether two commits hold the same files outside
// bench/results, as a run resumed in a later sitting (BENCH_RUN) does
// after the earlier sitting's results were committed.
func sameCode(ctx context.Context, a, b string) bool {
	if a == "" || b == "" || strings.ContainsAny(a+b, " ") {
		return false
	}
	return exec.CommandContext(ctx, "git", "diff", "--quiet", a, b, "--", ".", resultsPathspec).Run() == nil
}

// commitLine is the report's commit: the one the run started at, and the
// tree's when the report is written if that differs. A run builds its
// programs at the start, but a cluster program may build a node image
// when its turn comes, so a tree that changed during the run may be in
// part of what was measured; the report says so instead of naming only
// the last commit, as it did before bench.sh passed the first. When the
// two differ only in bench/results (same), the code measured is the
// first's, whichever sitting of the run measured it.
func commitLine(started, now string, same bool) string {
	switch {
	case started == "":
		return now
	case started == now:
		return started
	case same:
		return fmt.Sprintf("%s (the report was written at %s, which differs from it only in bench/results)", started, now)
	}
	return fmt.Sprintf("%s (the tree was %s when the report was written; a program that built from it after the start measured that tree)", started, now)
}

// procField returns the value of the first "key : value" line of a /proc
// file.
func procField(path, key string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return "", fmt.Errorf("no %q in %s", key, path)
}
