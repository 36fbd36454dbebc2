package scrape

import (
	"strings"
	"testing"
)

const kubelet = `# HELP storage_operation_duration_seconds [ALPHA] Storage operation duration
# TYPE storage_operation_duration_seconds histogram
storage_operation_duration_seconds_bucket{operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev",le="+Inf"} 3
storage_operation_duration_seconds_sum{operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 0.06
storage_operation_duration_seconds_count{operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 3
storage_operation_duration_seconds_bucket{operation_name="map_volume",status="fail-unknown",volume_plugin="kubernetes.io/csi:storage.plinth.dev",le="+Inf"} 1
storage_operation_duration_seconds_sum{operation_name="map_volume",status="fail-unknown",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 5
storage_operation_duration_seconds_count{operation_name="map_volume",status="fail-unknown",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 1
storage_operation_duration_seconds_bucket{operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/projected",le="+Inf"} 7
storage_operation_duration_seconds_sum{operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/projected"} 0.7
storage_operation_duration_seconds_count{operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/projected"} 7
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 40
rest_client_requests_total{code="404",host="10.0.0.1:6443",method="GET"} 2
rest_client_requests_total{code="201",host="10.0.0.1:6443",method="POST"} 5
`

func TestSums(t *testing.T) {
	s, err := Parse(strings.NewReader(kubelet))
	if err != nil {
		t.Fatal(err)
	}
	ok := s.Sum("storage_operation_duration_seconds", map[string]string{"operation_name": "map_volume", "status": "success"})
	if ok.Count != 3 || ok.Sum != 0.06 {
		t.Errorf("successful map_volume = %+v; want the 3 successful ones summing 0.06 s", ok)
	}
	if all := s.Sum("storage_operation_duration_seconds", nil); all.Count != 11 {
		t.Errorf("all operations = %+v; want 11 observations", all)
	}
	if d := ok.Minus(Totals{Count: 1, Sum: 0.01}); d.Count != 2 || d.Mean() < 0.0249 || d.Mean() > 0.0251 {
		t.Errorf("difference %+v, mean %g; want 2 operations of 25 ms", d, d.Mean())
	}
	by := s.By("rest_client_requests_total", "method", nil)
	if by["GET"].Sum != 42 || by["POST"].Sum != 5 || len(by) != 2 {
		t.Errorf("requests by method = %+v; want GET 42 (200s and 404s), POST 5", by)
	}
	if s.Sum("apiserver_watch_events_total", nil) != (Totals{}) {
		t.Error("a metric the scrape lacks must sum to zero")
	}
	if (Totals{}).Mean() != 0 {
		t.Error("the mean of nothing must be 0")
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	if _, err := Parse(strings.NewReader("metric{unclosed 1\n")); err == nil {
		t.Error("a malformed scrape parsed")
	}
}
