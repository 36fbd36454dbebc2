package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/scrape"
)

// The kubelet's metrics a run reads: client-go's, for the kubelet's calls
// to the API server (its pod status writes, the service account tokens of
// projected volumes and, for a pod with a claim, the claim and its PV,
// which its volume manager GETs one after another), and its volume
// operations.
const (
	metricRequests   = "rest_client_requests_total"
	metricRateLimit  = "rest_client_rate_limiter_duration_seconds"
	metricRequestDur = "rest_client_request_duration_seconds"
	metricVolumeOps  = "storage_operation_duration_seconds"
	// plinth-node's own time per operation (publish: NodePublishVolume).
	metricPlinthOps = "plinth_operation_duration_seconds"
)

// kubeletWork is what the node's kubelet did between two scrapes.
type kubeletWork struct {
	requests  map[string]float64       // by HTTP method
	limiter   scrape.Totals            // waits for its clients' rate limiters
	inRequest scrape.Totals            // time in requests, the wait excluded
	mounts    map[string]scrape.Totals // successful volume_mount by plugin
	// publish is plinth-node's own time in NodePublishVolume, the part
	// of the kubelet's volume_mount that is Plinth's.
	publish scrape.Totals
}

// nodeScrapes are the metrics of the node's kubelet and plinth-node at
// one moment.
type nodeScrapes struct{ kubelet, plinth scrape.Scrape }

func scrapeNode(ctx context.Context, cs kubernetes.Interface, node, plinthMetrics string) (nodeScrapes, error) {
	k, err := scrape.Kubelet(ctx, cs, node)
	if err != nil {
		return nodeScrapes{}, err
	}
	p, err := scrape.Endpoint(ctx, plinthMetrics)
	if err != nil {
		return nodeScrapes{}, fmt.Errorf("plinth-node: %w", err)
	}
	return nodeScrapes{kubelet: k, plinth: p}, nil
}

// nodeDelta is what the kubelet and plinth-node counted between before
// and after.
func nodeDelta(before, after nodeScrapes) kubeletWork {
	k := kubeletDelta(before.kubelet, after.kubelet)
	publish := map[string]string{"operation": "publish"}
	k.publish = after.plinth.Sum(metricPlinthOps, publish).Minus(before.plinth.Sum(metricPlinthOps, publish))
	return k
}

// kubeletDelta is what the kubelet counted between before and after.
func kubeletDelta(before, after scrape.Scrape) kubeletWork {
	k := kubeletWork{requests: map[string]float64{}, mounts: map[string]scrape.Totals{}}
	was := before.By(metricRequests, "method", nil)
	for m, t := range after.By(metricRequests, "method", nil) {
		if d := t.Sum - was[m].Sum; d > 0 {
			k.requests[m] = d
		}
	}
	k.limiter = after.Sum(metricRateLimit, nil).Minus(before.Sum(metricRateLimit, nil))
	k.inRequest = after.Sum(metricRequestDur, nil).Minus(before.Sum(metricRequestDur, nil))
	ok := map[string]string{"operation_name": "volume_mount", "status": "success"}
	was = before.By(metricVolumeOps, "volume_plugin", ok)
	for p, t := range after.By(metricVolumeOps, "volume_plugin", ok) {
		if d := t.Minus(was[p]); d.Count > 0 {
			k.mounts[p] = d
		}
	}
	return k
}

// String says it in one line: API requests by method, the time they
// waited for the client's rate limit and spent in flight (summed over
// requests, which overlap), and the volume mounts by plugin.
func (k kubeletWork) String() string {
	var total float64
	var methods []string
	for _, m := range slices.Sorted(maps.Keys(k.requests)) {
		n := k.requests[m]
		total += n
		methods = append(methods, fmt.Sprintf("%s %.0f", m, n))
	}
	var mounts []string
	for _, p := range slices.Sorted(maps.Keys(k.mounts)) {
		t := k.mounts[p]
		mounts = append(mounts, fmt.Sprintf("%s %d × %.1f ms", strings.TrimPrefix(p, "kubernetes.io/"), t.Count, t.Mean()*1000))
	}
	line := fmt.Sprintf("%.0f API requests (%s), %.2fs waiting for its rate limit over %d requests, %.2fs in flight; volume_mount %s",
		total, strings.Join(methods, ", "), k.limiter.Sum, k.limiter.Count, k.inRequest.Sum, strings.Join(mounts, ", "))
	if k.publish.Count > 0 {
		line += fmt.Sprintf(" (of which plinth-node's NodePublishVolume %d × %.1f ms)", k.publish.Count, k.publish.Mean()*1000)
	}
	return line
}
