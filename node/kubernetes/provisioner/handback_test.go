package provisioner

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestHoldsGrow: a claim handed back for want of enforced sizes is held
// when it comes back, from when it comes back: 10 s, then twice as long
// each time, at most the limit; a claim never handed back is not held, and
// one not handed back for long is forgotten.
func TestHoldsGrow(t *testing.T) {
	const limit = 5 * time.Minute
	for times, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 6: limit, 1000: limit} {
		if got := holdFor(times, limit); got != want {
			t.Errorf("holdFor(%d) = %s, want %s", times, got, want)
		}
	}

	var h holds
	t0 := time.Unix(1e9, 0)
	if d, started := h.hold("a", t0, limit); d != 0 || started {
		t.Errorf("a claim never handed back: hold %s (started %v), want none", d, started)
	}
	h.handedBack("a", t0, limit)
	back := t0.Add(3 * time.Second) // placed here again
	if d, started := h.hold("a", back, limit); d != 10*time.Second || !started {
		t.Errorf("first return: hold %s (started %v), want 10s, started", d, started)
	}
	if d, started := h.hold("a", back.Add(4*time.Second), limit); d != 6*time.Second || started {
		t.Errorf("during the hold: %s left (started %v), want 6s, not started again", d, started)
	}
	if d, _ := h.hold("a", back.Add(10*time.Second), limit); d != 0 {
		t.Errorf("after the hold: %s left, want none", d)
	}
	h.handedBack("a", back.Add(10*time.Second), limit)
	if d, started := h.hold("a", back.Add(time.Minute), limit); d != 20*time.Second || !started {
		t.Errorf("second return: hold %s (started %v), want 20s, started", d, started)
	}

	h.handedBack(types.UID("b"), t0.Add(5*limit+time.Hour), limit)
	if _, kept := h.claims["a"]; kept {
		t.Errorf("claim a, last handed back hours ago, is still remembered")
	}
}
