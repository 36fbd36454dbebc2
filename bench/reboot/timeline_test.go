package main

import (
	"math"
	"testing"
	"time"

	"source.plinth.dev/bench/result"
)

// at is a host time in the test's boot: seconds after 20:00:00.
func at(s float64) time.Time {
	return time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
}

// guestLine is a log tree line stamped at guest time g (seconds after
// 20:00:00 by the guest's clock).
func guestLine(g float64, msg string) string {
	return "I" + at(g).Format("0102 15:04:05.000000") + " root.x file.go:1] " + msg
}

// TestGuestMilestonesOnHostClock: a guest whose clock runs 0.7 s behind
// this host's, lines arriving 2 ms or more after their stamp: every
// milestone lands on the host's clock within the quickest line's trip.
func TestGuestMilestonesOnHostClock(t *testing.T) {
	const behind = 0.7
	arrive := func(g, trip float64, msg string) line {
		return line{at: at(g + behind + trip), text: guestLine(g, msg)}
	}
	lines := []line{
		{at: at(9), text: "[    0.4] virtio_blk virtio0: [vda] 4194304 512-byte logical blocks"},
		arrive(10.0, 0.050, "init started at 1.500000s of the boot clock (CLOCK_BOOTTIME), now 1.800000s"),
		arrive(12.0, 0.002, "node plinth-vm is up: data directory /data, services [kubelet]"),
		arrive(13.0, 0.300, "containerd is ready"),
		arrive(14.0, 0.010, "kubelet is ready"),
		arrive(14.5, 0.010, "NodeGetInfo ok in 1ms"),
		arrive(15.0, 0.010, "NodePublishVolume ok in 9ms"),
		arrive(16.0, 0.010, "NodePublishVolume ok in 9ms"),
		arrive(30.0, 0.010, "NodePublishVolume ok in 9ms"), // after the probe's line
		{at: at(17), text: "garbage I1129 20:00:01.000000 root.x f.go:1] containerd is ready"},
	}
	var m milestones
	if err := guestMilestones(&m, lines, at(17.0)); err != nil {
		t.Fatal(err)
	}
	near := func(what string, got time.Time, want float64) {
		t.Helper()
		// The offset is found to the quickest line's trip (2 ms).
		if d := got.Sub(at(want + behind)).Seconds(); math.Abs(d-0.002) > 1e-6 {
			t.Errorf("%s: %v, want %.3f s after 20:00 on the guest's clock + %.1f s", what, got, want, behind)
		}
	}
	near("init", m.initStart, 10.0-0.3)
	near("root up", m.nodeUp, 12.0)
	near("containerd", m.containerd, 13.0)
	near("kubelet", m.kubelet, 14.0)
	near("registered", m.registered, 14.5)
	near("last publication before the probe's line", m.published, 16.0)
	near("first byte", m.firstByte, 17.0)
}

// TestSplitIsAChain: phases add up to the total, and a milestone the probe
// did not wait for (Plinth ready after the probe's line; the Node posted
// Ready after it) adds nothing.
func TestSplitIsAChain(t *testing.T) {
	m := milestones{
		reboot: at(0), off: at(5), on: at(6),
		initStart: at(8), nodeUp: at(10), containerd: at(11), nodeReady: at(20),
		registered: at(15), published: at(22), firstByte: at(25),
	}
	want := []float64{5, 2, 2, 1, 9, 2, 3, 24}
	if got := m.split(true); !equal(got, want) {
		t.Errorf("claims: %v, want %v", got, want)
	}
	// Without claims, no Plinth phase: the probe waits for the Node.
	want = []float64{5, 2, 2, 1, 9, 0, 5, 24}
	if got := m.split(false); !equal(got, want) {
		t.Errorf("no claims: %v, want %v", got, want)
	}
	// The probe's line before the Node Ready: the kubelet phase ends
	// there, and the rest is 0.
	m.firstByte = at(18)
	want = []float64{5, 2, 2, 1, 7, 0, 0, 17}
	if got := m.split(true); !equal(got, want) {
		t.Errorf("line before Ready: %v, want %v", got, want)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

// TestLockupsFound: the console lines of a soft lockup are what a hung
// boot's error shows.
func TestLockupsFound(t *testing.T) {
	lines := []line{{text: "ok"}, {text: "[  300.1] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [kubelet:178]"}, {text: "[  300.1] Modules linked in: xfs"}}
	if got := lockups(lines); len(got) != 2 || got[0] != lines[1].text {
		t.Errorf("lockups: %q", got)
	}
	if got := lockups(lines[:1]); len(got) != 0 {
		t.Errorf("lockups of a healthy console: %q", got)
	}
}

// TestNoPlinthPointWithoutClaims: the baseline's series has every phase
// but Plinth's, which it does not have, and the total.
func TestNoPlinthPointWithoutClaims(t *testing.T) {
	m := milestones{reboot: at(0), off: at(1), on: at(1), initStart: at(2), nodeUp: at(3), containerd: at(4), nodeReady: at(5), registered: at(5), published: at(6), firstByte: at(7)}
	dir := t.TempDir()
	runs := []measured{{claims: false, m: m, split: m.split(false)}, {claims: true, m: m, split: m.split(true)}}
	if err := writeResult(dir, "cut", runs, nil); err != nil {
		t.Fatal(err)
	}
	rs, err := result.ReadDir(dir)
	if err != nil || len(rs) != 1 {
		t.Fatalf("results: %v, %v", rs, err)
	}
	for _, s := range rs[0].Series {
		var xs []float64
		for _, p := range s.Points {
			xs = append(xs, p.X)
		}
		want := []float64{1, 2, 3, 4, 5, 6, 7, 8}
		if s.Name == configName(false) {
			want = []float64{1, 2, 3, 4, 5, 7, 8}
		}
		if !equal(xs, want) {
			t.Errorf("series %s: x %v, want %v", s.Name, xs, want)
		}
	}
}
