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

func TestSlope(t *testing.T) {
	b0, per, ok := slope([]result.Point{{X: 0, Runs: []float64{1000, 1200, 1100}}, {X: 10, Runs: []float64{2000}}, {X: 100, Runs: []float64{11100, 11000, 11200}}})
	if !ok || b0 != 1100 || per != 100 {
		t.Errorf("slope = %v, %v, %v; want 1100, 100, true", b0, per, ok)
	}
	if _, _, ok := slope([]result.Point{{X: 5, Runs: []float64{1}}}); ok {
		t.Error("slope of one point: ok")
	}
}
