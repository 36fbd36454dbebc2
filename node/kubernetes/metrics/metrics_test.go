package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/volumetest"
)

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func gather(t *testing.T, reg prometheus.Gatherer) metricstest.Families {
	t.Helper()
	f, err := metricstest.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestObserveAndRestarts(t *testing.T) {
	m, reg := newMetrics(t)
	start := time.Now()
	m.Observe(Publish, start, "")
	m.Observe(Publish, start, "NotFound")
	m.Observe(Provision, start, ReasonInfeasible)
	m.Restarted("root.kubernetes")
	m.Restarted("root.kubernetes")
	m.QuotaRestored(2, 8<<20)
	m.QuotaRestored(1, 4096)
	m.QuotaReleased(1, 4<<20)
	m.VolumesAbnormal(3)
	m.VolumesAbnormal(2) // a gauge: the last count holds
	var none *Metrics    // a node without an endpoint
	none.Observe(Publish, start, "")
	none.Restarted("root")
	none.QuotaRestored(1, 1)
	none.QuotaReleased(1, 1)
	none.VolumesAbnormal(1)
	f := gather(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"plinth_operation_duration_seconds", []string{"operation", "publish"}, 2},
		{"plinth_operation_errors_total", []string{"operation", "publish", "code", "NotFound"}, 1},
		{"plinth_operation_errors_total", []string{"operation", "provision", "code", "Infeasible"}, 1},
		{"plinth_operation_duration_seconds", []string{"operation", "provision"}, 1},
		{"plinth_supervisor_restarts_total", []string{"runnable", "root.kubernetes"}, 2},
		{"plinth_quota_audit_restored_entries_total", nil, 3},
		{"plinth_quota_audit_restored_bytes_total", nil, 8<<20 + 4096},
		{"plinth_quota_watch_released_entries_total", nil, 1},
		{"plinth_quota_watch_released_bytes_total", nil, 4 << 20},
		{"plinth_volumes_abnormal", nil, 2},
	} {
		if got := f.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// One registry per process: a second set on it is a wiring bug.
	if _, err := New(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded")
	}
}

func TestReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("creating: %w", context.Canceled), ReasonCanceled},
		{fmt.Errorf("%w: 1 GiB requested", volume.ErrNoSpace), ReasonInfeasible},
		{fmt.Errorf("%w: bad size", volume.ErrInvalid), ReasonInvalid},
		{fmt.Errorf("creating PV: %w", apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumes"}, "pv")), ReasonAPI},
		{status.Error(codes.Unavailable, "down"), "Unavailable"},
		{errors.New("disk on fire"), ReasonVolume},
	} {
		if got := Reason(c.err); got != c.want {
			t.Errorf("Reason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestWorkqueueProvider runs a real client-go delaying queue with the
// provider and checks depth, adds and retries, and that a queue built
// again under the same name (a restarted controller) starts at depth 0.
func TestWorkqueueProvider(t *testing.T) {
	m, reg := newMetrics(t)
	q := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
		Name: "claims", MetricsProvider: m.WorkqueueProvider()})
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k)
	}
	k, _ := q.Get()
	q.Done(k)
	q.AddAfter(k, 0) // a retry
	f := gather(t, reg)
	for _, c := range []struct {
		name string
		want float64
	}{{"plinth_workqueue_depth", 3}, {"plinth_workqueue_adds_total", 4}, {"plinth_workqueue_retries_total", 1}} {
		if got := f.Value(c.name, "name", "claims"); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	q.ShutDown()
	q2 := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
		Name: "claims", MetricsProvider: m.WorkqueueProvider()})
	defer q2.ShutDown()
	if got := gather(t, reg).Value("plinth_workqueue_depth", "name", "claims"); got != 0 {
		t.Errorf("depth of a new queue of the same name = %v, want 0", got)
	}
}

// TestVolumeCollector creates real volumes, quarantines one, and checks
// the counts and sizes a gather reports, and the quarantined volume it
// lists, before and after the collector is unregistered.
func TestVolumeCollector(t *testing.T) {
	m, reg := newMetrics(t)
	d, qerr := volumetest.DataDir(t, t.TempDir())
	vols, err := volume.New(volume.Config{Data: d, QuotaError: qerr, AllowUnenforced: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, mode := range []volume.Mode{volume.Filesystem, volume.Filesystem, volume.Block} {
		if _, err := vols.Create(ctx, fmt.Sprintf("v%d", i), mode, 4<<20); err != nil {
			t.Fatal(err)
		}
	}
	// v3, whose Delete PV vanished: in quarantine, no more a volume.
	if _, err := vols.Create(ctx, "v3", volume.Filesystem, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := vols.SetReclaimPolicy(ctx, "v3", volume.ReclaimDelete); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0)
	if err := vols.Quarantine(ctx, "v3", at); err != nil {
		t.Fatal(err)
	}
	unwatch, err := m.WatchVolumes(vols)
	if err != nil {
		t.Fatal(err)
	}
	f := gather(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"plinth_volumes", []string{"mode", "filesystem"}, 2},
		{"plinth_volumes", []string{"mode", "block"}, 1},
		{"plinth_volumes_allocated_bytes", []string{"mode", "filesystem"}, 8 << 20},
		{"plinth_volumes_allocated_bytes", []string{"mode", "block"}, 4 << 20},
		{"plinth_volume_leftovers", nil, 0},
		{"plinth_volume_quarantined_since_seconds", []string{"volume", "v3", "mode", "filesystem"}, float64(at.Unix())},
	} {
		if got := f.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if size, avail := f.Value("plinth_data_filesystem_size_bytes"), f.Value("plinth_data_filesystem_available_bytes"); size <= 0 || avail > size {
		t.Errorf("data filesystem size %v, available %v", size, avail)
	}
	unwatch()
	if _, ok := gather(t, reg)["plinth_volumes"]; ok {
		t.Error("volume metrics still reported after unwatch")
	}
}

func TestNotReady(t *testing.T) {
	st := []supervisor.NodeStatus{
		{DN: "root", State: "running", Healthy: true},
		{DN: "root.datadir", State: "done"},
		{DN: "root.kubernetes", State: "backoff", Restarts: 3},
		{DN: "root.csi", State: "running"},
	}
	got := strings.Join(NotReady(st), "; ")
	if want := "root.kubernetes (backoff, 3 restarts); root.csi (starting, 0 restarts)"; got != want {
		t.Errorf("NotReady = %q, want %q", got, want)
	}
}

func TestHealthEndpoints(t *testing.T) {
	_, reg := newMetrics(t)
	for _, c := range []struct {
		name             string
		status           []supervisor.NodeStatus
		healthz, readyz  int
		readyzMentioning string
	}{
		{"ready", []supervisor.NodeStatus{{DN: "root", State: "running", Healthy: true}}, 200, 200, "ok"},
		{"backoff", []supervisor.NodeStatus{{DN: "root", State: "running", Healthy: true}, {DN: "root.k", State: "backoff"}}, 200, 503, "root.k (backoff"},
		{"stopped", nil, 503, 503, "stopped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(Handler(reg, func() []supervisor.NodeStatus { return c.status }))
			defer srv.Close()
			for path, want := range map[string]int{"/healthz": c.healthz, "/readyz": c.readyz} {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
				}
			}
			resp, err := http.Get(srv.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			buf := new(strings.Builder)
			if _, err := io.Copy(buf, resp.Body); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), c.readyzMentioning) {
				t.Errorf("/readyz said %q, want it to mention %q", buf.String(), c.readyzMentioning)
			}
		})
	}
}
