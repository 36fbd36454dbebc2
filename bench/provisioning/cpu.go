package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"source.plinth.dev/bench/procstat"
	"source.plinth.dev/test/launch"
)

// cpuComponents are the cluster's processes whose CPU a run reports, by
// the names test/launch gives them. What is not among them (container
// shims, runc, the pods, local-path-provisioner) is the machine's busy
// time less theirs and the benchmark's own.
var cpuComponents = []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet", "containerd", "plinth-node"}

// selfName is the benchmark process in a cpuUse.
const selfName = "benchmark"

// cpuSnapshot is the CPU time used so far by the machine and by each
// component, at one moment.
type cpuSnapshot struct {
	at          time.Time
	busy, total time.Duration
	byComponent map[string]time.Duration
}

func snapshotCPU(c *launch.Cluster) (cpuSnapshot, error) {
	s := cpuSnapshot{at: time.Now(), byComponent: map[string]time.Duration{}}
	pids := map[string]int{selfName: os.Getpid()}
	for _, name := range cpuComponents {
		if pid := c.PID(name); pid != 0 {
			pids[name] = pid
		}
	}
	for name, pid := range pids {
		t, err := procstat.CPU(pid)
		if err != nil {
			return cpuSnapshot{}, fmt.Errorf("CPU time of %s: %w", name, err)
		}
		s.byComponent[name] = t
	}
	var err error
	if s.busy, s.total, err = procstat.Machine(); err != nil {
		return cpuSnapshot{}, err
	}
	return s, nil
}

// cpuUse is the CPU a run used, from one snapshot to the next.
type cpuUse struct {
	wall        time.Duration
	cores       int
	busy, total time.Duration
	byComponent map[string]time.Duration
}

// cpuDelta is what was used between before and after. A component that
// was restarted in between (its counter went back) is left out rather
// than reported negative.
func cpuDelta(before, after cpuSnapshot) cpuUse {
	u := cpuUse{wall: after.at.Sub(before.at), cores: runtime.NumCPU(), busy: after.busy - before.busy, total: after.total - before.total, byComponent: map[string]time.Duration{}}
	for name, t := range after.byComponent {
		if was, ok := before.byComponent[name]; ok && t >= was {
			u.byComponent[name] = t - was
		}
	}
	return u
}

// String says how busy the machine was and who kept it busy: "12.3s busy
// of 2 cores × 7.1s (87%): kube-apiserver 4.1s, ...; the rest 2.0s".
func (u cpuUse) String() string {
	var parts []string
	var named time.Duration
	for _, name := range append(append([]string{}, cpuComponents...), selfName) {
		t, ok := u.byComponent[name]
		if !ok {
			continue
		}
		named += t
		parts = append(parts, fmt.Sprintf("%s %.2fs", name, t.Seconds()))
	}
	share := 0.0
	if u.total > 0 {
		share = 100 * u.busy.Seconds() / u.total.Seconds()
	}
	return fmt.Sprintf("%.2fs busy of %d cores × %.2fs (%.0f%%): %s; the rest (shims, runc, pods, other processes) %.2fs",
		u.busy.Seconds(), u.cores, u.wall.Seconds(), share, strings.Join(parts, ", "), max(u.busy-named, 0).Seconds())
}
