package main

import (
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// A partial walk during the fill (ended at 20 s), the fill done at
	// 30 s, then a walk of the full volume from 100 to 200 s (scrapes at
	// 199 and 201).
	partial := newWindow(at(19), at(20), 2, 5*time.Second)
	fullWalk := newWindow(at(199), at(201), 2, 99*time.Second)
	if fullWalk.start != at(100) || fullWalk.end != at(201) {
		t.Fatalf("window %v..%v, want 100 s..201 s", fullWalk.start.Sub(t0), fullWalk.end.Sub(t0))
	}
	full, margin, interval := at(30), 10*time.Second, 300*time.Second
	for _, c := range []struct {
		name       string
		start, end int
		ws         []window
		want       class
	}{
		{"inside the full walk", 120, 150, []window{partial, fullWalk}, walking},
		{"before the full walk, well clear", 40, 80, []window{partial, fullWalk}, baseline},
		{"before the full walk, within the margin", 40, 95, []window{partial, fullWalk}, mixed},
		{"across the walk's start", 90, 110, []window{partial, fullWalk}, mixed},
		{"across the walk's end", 190, 210, []window{partial, fullWalk}, mixed},
		{"just after the walk, within the margin", 205, 230, []window{partial, fullWalk}, mixed},
		{"after the last walk, before its next tick", 240, 380, []window{partial, fullWalk}, baseline},
		{"after the last walk, past its next tick: one may run", 240, 395, []window{partial, fullWalk}, unresolved},
		{"no later walk known yet", 40, 310, []window{partial}, unresolved},
		{"before the last walk's next tick", 40, 80, []window{partial}, baseline},
		{"inside a walk that began before the fill ended", 12, 16, []window{partial, fullWalk}, mixed},
	} {
		if got := classify(span{at(c.start), at(c.end)}, c.ws, full, margin, interval); got != c.want {
			t.Errorf("%s (%d..%d s): class %d, want %d", c.name, c.start, c.end, got, c.want)
		}
	}
}

// TestWalkRatesCountOnlyTheBigVolume checks the walk's pace against what
// one run at 1,000,000 files saw: the fio volume's walk in a window of
// its own, timed at 0.0 s, which made a rate of 68 million entries a
// second beside the big volume's 1,995, and a walk begun before the fill
// ended, which walked fewer files than the rate counts.
func TestWalkRatesCountOnlyTheBigVolume(t *testing.T) {
	full := time.Unix(1000, 0)
	at := func(s float64) time.Time { return full.Add(time.Duration(s * float64(time.Second))) }
	ws := []window{
		newWindow(at(-300), at(-299), 1, 200*time.Second),       // began before the fill ended
		newWindow(at(200), at(201), 1, 15*time.Millisecond),     // the fio volume alone, 0.0 s in the log
		newWindow(at(702), at(703), 1, 501900*time.Millisecond), // the big volume
	}
	rates := walkRates(ws, full, 1000000)
	if len(rates) != 1 || rates[0] < 1990 || rates[0] > 2000 {
		t.Errorf("walkRates = %v, want the big volume's walk alone, 1,001,001 entries in 501.9 s (1,994 a second)", rates)
	}
}
