package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// watchCounters are the API server's running totals of what it sent to
// claim watchers: events, and their encoded bytes (each watcher's copy
// counted).
type watchCounters struct{ events, bytes float64 }

// Metric names of kube-apiserver's watch serving (one sample per
// resource).
const (
	metricWatchEvents = "apiserver_watch_events_total"
	metricWatchBytes  = "apiserver_watch_events_sizes_sum"
)

func scrapeWatch(ctx context.Context, c kubernetes.Interface) (watchCounters, error) {
	b, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return watchCounters{}, fmt.Errorf("reading kube-apiserver metrics: %w", err)
	}
	return parseWatch(string(b))
}

// parseWatch sums, in the Prometheus text format, the samples of the
// watch metrics that are about claims (label resource, or kind in older
// versions).
func parseWatch(text string) (watchCounters, error) {
	var w watchCounters
	found := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var into *float64
		switch {
		case strings.HasPrefix(line, metricWatchEvents+"{"):
			into = &w.events
		case strings.HasPrefix(line, metricWatchBytes+"{"):
			into = &w.bytes
		default:
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return w, fmt.Errorf("malformed metric line %q", line)
		}
		labels := line[:end]
		if !strings.Contains(labels, `resource="persistentvolumeclaims"`) && !strings.Contains(labels, `kind="PersistentVolumeClaim"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(line[end+1:])[0], 64)
		if err != nil {
			return w, fmt.Errorf("parsing %q: %w", line, err)
		}
		*into += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return w, err
	}
	if !found {
		return w, fmt.Errorf("no %s or %s samples for claims", metricWatchEvents, metricWatchBytes)
	}
	return w, nil
}
