package placement

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPick(t *testing.T) {
	now := time.Unix(1000, 0)
	later := now.Add(time.Minute)
	cases := []struct {
		name    string
		bytes   int64
		offers  []offer
		node    string
		why     string
		retries bool
	}{
		{name: "most room", bytes: 5, node: "b",
			offers: []offer{{node: "a", room: 6, admitted: true}, {node: "b", room: 9, admitted: true}, {node: "c", room: 4, admitted: true}}},
		{name: "topology first", bytes: 5, node: "a",
			offers: []offer{{node: "a", room: 6, admitted: true}, {node: "b", room: 9}}},
		{name: "held node passed over", bytes: 5, node: "a",
			offers: []offer{{node: "a", room: 6, admitted: true}, {node: "b", room: 9, admitted: true, heldUntil: later}}},
		{name: "hold over", bytes: 5, node: "b",
			offers: []offer{{node: "a", room: 6, admitted: true}, {node: "b", room: 9, admitted: true, heldUntil: now}}},
		{name: "no offers", bytes: 5, why: "no node publishes capacity"},
		{name: "none admitted", bytes: 5, why: "admit none of the 1 nodes",
			offers: []offer{{node: "a", room: 9}}},
		{name: "all held", bytes: 5, why: "each of the 2 nodes its StorageClass admits handed it back", retries: true,
			offers: []offer{{node: "a", room: 9, admitted: true, heldUntil: later}, {node: "b", room: 9, admitted: true, heldUntil: later.Add(time.Second)}}},
		{name: "no room", bytes: 5, why: "no node has room for 5 bytes: the most any of the 2 nodes its StorageClass admits has is 4",
			offers: []offer{{node: "a", room: 4, admitted: true}, {node: "b", room: 3, admitted: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := pick("uid", c.bytes, c.offers, now)
			if v.node != c.node || !strings.Contains(v.why, c.why) || (c.why == "") != (v.why == "") {
				t.Errorf("pick = node %q, why %q; want node %q, why containing %q", v.node, v.why, c.node, c.why)
			}
			if c.retries && !v.retry.Equal(later) {
				t.Errorf("retry at %v; want %v, the first hold's end", v.retry, later)
			}
		})
	}
}

// Nodes of equal room share the claims: each takes some of a hundred.
func TestPickSpreadsTies(t *testing.T) {
	offers := []offer{{node: "a", room: 9, admitted: true}, {node: "b", room: 9, admitted: true}, {node: "c", room: 9, admitted: true}}
	got := map[string]int{}
	for i := range 100 {
		got[pick(types.UID(rune('A'+i%26))+types.UID(string(rune('0'+i/26))), 1, offers, time.Unix(0, 0)).node]++
	}
	for _, o := range offers {
		if got[o.node] == 0 {
			t.Errorf("node %s took none of 100 claims (%v)", o.node, got)
		}
	}
}

func TestLedger(t *testing.T) {
	var l ledger
	now := time.Unix(1000, 0)
	l.promise("a", 5, now)
	l.promise("a", 3, now.Add(2*time.Second))
	if got := l.owed("a", now.Add(2*time.Second)); got != 8 {
		t.Errorf("owed %d; want 8", got)
	}
	// Figures published 3.5 s after the first placement show it, not
	// the second.
	l.published("a", now.Add(3500*time.Millisecond))
	if got := l.owed("a", now.Add(3500*time.Millisecond)); got != 3 {
		t.Errorf("owed %d after a publication; want 3", got)
	}
	// A node that never publishes again is owed nothing after promiseMax.
	if got := l.owed("a", now.Add(promiseMax+3*time.Second)); got != 0 {
		t.Errorf("owed %d after %s; want 0", got, promiseMax)
	}
}

func TestAttempts(t *testing.T) {
	var a attempts
	now := time.Unix(1000, 0)
	if !a.heldUntil("u", "a").IsZero() {
		t.Fatal("a node never tried is held")
	}
	a.placed("u", "7", "a", now)
	if got := a.heldUntil("u", "a"); !got.Equal(now.Add(holdBase)) {
		t.Errorf("held until %v after one placement; want %v", got, now.Add(holdBase))
	}
	a.placed("u", "9", "a", now)
	if got := a.heldUntil("u", "a"); !got.Equal(now.Add(2 * holdBase)) {
		t.Errorf("held until %v after two; want %v", got, now.Add(2*holdBase))
	}
	if !a.stale("u", "9") || a.stale("u", "10") {
		t.Error("stale should hold for the version the last placement was made from alone")
	}
	a.placed("v", "1", "b", now.Add(forgetAfter+time.Second))
	if !a.heldUntil("u", "a").IsZero() {
		t.Error("a claim not placed for forgetAfter is still remembered")
	}
}
