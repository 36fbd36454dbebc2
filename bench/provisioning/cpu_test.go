package main

import (
	"strings"
	"testing"
	"time"
)

func TestCPUDelta(t *testing.T) {
	at := time.Unix(1000, 0)
	before := cpuSnapshot{at: at, busy: 10 * time.Second, total: 100 * time.Second, byComponent: map[string]time.Duration{
		"kube-apiserver": 5 * time.Second, "plinth-node": time.Second, "kubelet": 9 * time.Second, selfName: 0,
	}}
	after := cpuSnapshot{at: at.Add(5 * time.Second), busy: 18 * time.Second, total: 110 * time.Second, byComponent: map[string]time.Duration{
		// The kubelet was restarted: its counter went back.
		"kube-apiserver": 8 * time.Second, "plinth-node": 1500 * time.Millisecond, "kubelet": time.Second, selfName: time.Second,
		// A component that appeared meanwhile has no starting point.
		"etcd": 2 * time.Second,
	}}
	u := cpuDelta(before, after)
	if u.wall != 5*time.Second || u.busy != 8*time.Second || u.total != 10*time.Second {
		t.Errorf("wall %v, busy %v of %v; want 5s, 8s of 10s", u.wall, u.busy, u.total)
	}
	want := map[string]time.Duration{"kube-apiserver": 3 * time.Second, "plinth-node": 500 * time.Millisecond, selfName: time.Second}
	if len(u.byComponent) != len(want) {
		t.Errorf("components %v; want %v (no restarted or new one)", u.byComponent, want)
	}
	for name, d := range want {
		if u.byComponent[name] != d {
			t.Errorf("%s used %v; want %v", name, u.byComponent[name], d)
		}
	}
	line := u.String()
	for _, s := range []string{"8.00s busy of", "× 5.00s (80%)", "kube-apiserver 3.00s", "plinth-node 0.50s", "benchmark 1.00s", "the rest (shims, runc, pods, other processes) 3.50s"} {
		if !strings.Contains(line, s) {
			t.Errorf("summary %q lacks %q", line, s)
		}
	}
}
