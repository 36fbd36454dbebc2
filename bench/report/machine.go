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
// still worth having without it.
func describeMachine(ctx context.Context) machine {
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
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		// Untracked files count too: a new benchmark not yet committed
		// changes what was measured.
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain").Output(); err == nil && len(st) > 0 {
			m.Commit += " + uncommitted changes"
		}
	}
	return m
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
