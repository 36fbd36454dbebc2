package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/scrape"
)

// watchCounters are the API server's running totals of what it sent to
// claim watchers: events, and their encoded bytes (each watcher's copy
// counted).
type watchCounters struct{ events, bytes float64 }

// Metrics of kube-apiserver's watch serving (one series per resource): a
// counter of events and a histogram of their sizes, whose sum is bytes.
const (
	metricWatchEvents = "apiserver_watch_events_total"
	metricWatchSizes  = "apiserver_watch_events_sizes"
)

func scrapeWatch(ctx context.Context, c kubernetes.Interface) (watchCounters, error) {
	s, err := scrape.APIServer(ctx, c)
	if err != nil {
		return watchCounters{}, err
	}
	return claimWatch(s)
}

// claimWatch sums the watch metrics' series that are about claims (label
// resource, or kind in older versions).
func claimWatch(s scrape.Scrape) (watchCounters, error) {
	var w watchCounters
	found := false
	for _, claims := range []map[string]string{{"resource": "persistentvolumeclaims"}, {"kind": "PersistentVolumeClaim"}} {
		events, sizes := s.Sum(metricWatchEvents, claims), s.Sum(metricWatchSizes, claims)
		w.events += events.Sum
		w.bytes += sizes.Sum
		found = found || events.Count > 0 || sizes.Count > 0
	}
	if !found {
		return w, fmt.Errorf("no %s or %s series for claims", metricWatchEvents, metricWatchSizes)
	}
	return w, nil
}
