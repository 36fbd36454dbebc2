package e2e

import (
	"net/http"
	"testing"

	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/test/launch"
)

// nodeOps is one scrape of plinth-node's endpoint: its operation counts
// by name (attempts, failed ones included).
type nodeOps map[string]float64

// operations are the operations the workload's claims go through.
var operations = []string{"provision", "publish", "unpublish", "resize", "stats", "delete"}

// scrapeOps scrapes plinth-node's endpoint (launch gives it
// --metrics-address) and checks that it reports ready.
func scrapeOps(t *testing.T, c *launch.Cluster) nodeOps {
	t.Helper()
	base := "http://" + c.PlinthNodeMetrics
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("plinth-node /readyz: %s", resp.Status)
	}
	s, err := metricstest.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	ops := nodeOps{}
	for _, op := range operations {
		ops[op] = s.Families.Value("plinth_operation_duration_seconds", "operation", op)
	}
	return ops
}

// checkOpsSince checks that plinth-node counted, since before, at least
// as many operations as the test made happen (other tests share the node,
// so more is fine, fewer is a miscount).
func checkOpsSince(t *testing.T, c *launch.Cluster, before nodeOps, want map[string]int) int {
	t.Helper()
	after := scrapeOps(t, c)
	for _, op := range operations {
		if got := after[op] - before[op]; got < float64(want[op]) {
			t.Errorf("plinth-node counted %v %s operations during the workload, want at least %d", got, op, want[op])
		}
	}
	return len(want)
}
