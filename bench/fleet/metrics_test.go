package main

import (
	"testing"

	"source.plinth.dev/bench/result"
	"source.plinth.dev/bench/scrape/scrapetest"
)

func TestClaimWatch(t *testing.T) {
	text := `# HELP apiserver_watch_events_total [ALPHA] Number of events sent in watch clients
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{component="apiserver",group="",resource="persistentvolumeclaims",version="v1"} 120
apiserver_watch_events_total{component="apiserver",group="",resource="pods",version="v1"} 7
# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{component="apiserver",group="",resource="persistentvolumeclaims",version="v1",le="1024"} 3
apiserver_watch_events_sizes_bucket{component="apiserver",group="",resource="persistentvolumeclaims",version="v1",le="+Inf"} 120
apiserver_watch_events_sizes_sum{component="apiserver",group="",resource="persistentvolumeclaims",version="v1"} 1.5e+05
apiserver_watch_events_sizes_count{component="apiserver",group="",resource="persistentvolumeclaims",version="v1"} 120
apiserver_watch_events_sizes_bucket{component="apiserver",group="",resource="persistentvolumes",version="v1",le="+Inf"} 1
apiserver_watch_events_sizes_sum{component="apiserver",group="",resource="persistentvolumes",version="v1"} 99
apiserver_watch_events_sizes_count{component="apiserver",group="",resource="persistentvolumes",version="v1"} 1
`
	w, err := claimWatch(scrapetest.Parse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if w.events != 120 || w.bytes != 150000 {
		t.Errorf("claimWatch = %+v; want 120 events, 150000 bytes", w)
	}
	if _, err := claimWatch(scrapetest.Parse(t, "apiserver_watch_events_total{resource=\"pods\"} 1\n")); err == nil {
		t.Error("no claim samples: no error")
	}
}

// TestSlope: the line runs from the first fleet to the last, never from
// the control plane alone (x = 0), whose watchers' constant share would
// read as growth: here the fleets are flat at 4,000 B, and a line from
// x = 0 would say 20 B per node.
func TestSlope(t *testing.T) {
	b0, per, ok := slope([]result.Point{{X: 0, Runs: []float64{2000, 2100, 1900}}, {X: 10, Runs: []float64{4000}}, {X: 100, Runs: []float64{4000, 3900, 4100}}})
	if !ok || b0 != 4000 || per != 0 {
		t.Errorf("slope = %v, %v, %v; want 4000, 0, true", b0, per, ok)
	}
	b0, per, ok = slope([]result.Point{{X: 10, Runs: []float64{2000}}, {X: 100, Runs: []float64{11000, 10900, 11100}}})
	if !ok || b0 != 1000 || per != 100 {
		t.Errorf("slope = %v, %v, %v; want 1000, 100, true", b0, per, ok)
	}
	for _, points := range [][]result.Point{{{X: 5, Runs: []float64{1}}}, {{X: 0, Runs: []float64{1}}, {X: 5, Runs: []float64{2}}}} {
		if _, _, ok := slope(points); ok {
			t.Errorf("slope of %v: ok, want no line through fewer than two fleets", points)
		}
	}
}
