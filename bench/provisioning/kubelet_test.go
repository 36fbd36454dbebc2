package main

import (
	"strconv"
	"strings"
	"testing"

	"source.plinth.dev/bench/scrape/scrapetest"
)

func TestNodeDelta(t *testing.T) {
	kubelet := func(gets, waits int, waitSum float64, mounts int, mountSum float64) string {
		return strings.NewReplacer("GETS", itoa(gets), "WAITS", itoa(waits), "WSUM", ftoa(waitSum), "MOUNTS", itoa(mounts), "MSUM", ftoa(mountSum)).Replace(`# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="h",method="GET"} GETS
rest_client_requests_total{code="201",host="h",method="POST"} 10
# TYPE rest_client_rate_limiter_duration_seconds histogram
rest_client_rate_limiter_duration_seconds_bucket{host="h",verb="GET",le="+Inf"} WAITS
rest_client_rate_limiter_duration_seconds_sum{host="h",verb="GET"} WSUM
rest_client_rate_limiter_duration_seconds_count{host="h",verb="GET"} WAITS
# TYPE storage_operation_duration_seconds histogram
storage_operation_duration_seconds_bucket{operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev",le="+Inf"} MOUNTS
storage_operation_duration_seconds_sum{operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} MSUM
storage_operation_duration_seconds_count{operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} MOUNTS
`)
	}
	plinth := func(n int, sum float64, provisions int) string {
		return `# TYPE plinth_operation_duration_seconds histogram
plinth_operation_duration_seconds_bucket{operation="publish",le="+Inf"} ` + itoa(n) + `
plinth_operation_duration_seconds_sum{operation="publish"} ` + ftoa(sum) + `
plinth_operation_duration_seconds_count{operation="publish"} ` + itoa(n) + `
plinth_operation_duration_seconds_bucket{operation="provision",le="+Inf"} ` + itoa(provisions) + `
plinth_operation_duration_seconds_sum{operation="provision"} ` + itoa(provisions) + `
plinth_operation_duration_seconds_count{operation="provision"} ` + itoa(provisions) + `
`
	}
	before := nodeScrapes{kubelet: scrapetest.Parse(t, kubelet(100, 100, 1, 2, 0.1)), plinth: scrapetest.Parse(t, plinth(2, 0.004, 2))}
	after := nodeScrapes{kubelet: scrapetest.Parse(t, kubelet(400, 400, 4, 52, 10.1)), plinth: scrapetest.Parse(t, plinth(52, 0.104, 52))}
	k := nodeDelta(before, after)
	if k.requests["GET"] != 300 || len(k.requests) != 1 {
		t.Errorf("requests %+v; want 300 GETs and no POST (unchanged)", k.requests)
	}
	if k.limiter.Count != 300 || k.limiter.Sum != 3 {
		t.Errorf("rate limit waits %+v; want 300 waits summing 3 s", k.limiter)
	}
	if m := k.mounts["kubernetes.io/csi:storage.plinth.dev"]; m.Count != 50 || m.Mean() < 0.1999 || m.Mean() > 0.2001 {
		t.Errorf("CSI mounts %+v; want 50 of 200 ms", m)
	}
	if k.publish.Count != 50 || k.publish.Mean() < 0.00199 || k.publish.Mean() > 0.00201 {
		t.Errorf("publish %+v; want 50 of 2 ms, provisions not counted", k.publish)
	}
	line := k.String()
	for _, want := range []string{"300 API requests (GET 300)", "3.00s waiting for its rate limit over 300 requests", "csi:storage.plinth.dev 50 × 200.0 ms", "NodePublishVolume 50 × 2.0 ms"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
}

func itoa(i int) string     { return strconv.Itoa(i) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
