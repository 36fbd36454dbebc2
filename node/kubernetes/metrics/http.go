package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"source.plinth.dev/pkg/supervisor"
)

// statusTimeout bounds how long /healthz and /readyz wait for the
// supervisor to answer. A supervisor that cannot answer in that time is
// wedged, and the probe says so instead of hanging the kubelet's probe.
const statusTimeout = 5 * time.Second

// Handler serves the node's metrics and health on one listener:
//
//	/metrics  everything registered with g, in Prometheus' text format
//	/healthz  200 while the supervision tree runs and answers (liveness)
//	/readyz   200 while every runnable is running and healthy, or done
//	          (readiness); else 503 naming those that are not
//
// status is the supervisor's Status. Liveness is deliberately weaker than
// readiness: a runnable in backoff is the supervisor doing its job (the
// API server is down, say), which a restart of the process would not fix;
// a supervisor that no longer answers is not.
func Handler(g prometheus.Gatherer, status func() []supervisor.NodeStatus) http.Handler {
	mux := http.NewServeMux()
	// ContinueOnError: a collector that fails (say, the volumes
	// directory cannot be listed) must not hide every other metric.
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		st, err := statusOf(r.Context(), status)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: %d runnables\n", len(st))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st, err := statusOf(r.Context(), status)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if bad := NotReady(st); len(bad) > 0 {
			http.Error(w, "not ready: "+strings.Join(bad, ", "), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: %d runnables ready\n", len(st))
	})
	return mux
}

// statusOf asks the supervisor for its status, giving up after
// statusTimeout or when ctx ends.
func statusOf(ctx context.Context, status func() []supervisor.NodeStatus) ([]supervisor.NodeStatus, error) {
	ch := make(chan []supervisor.NodeStatus, 1)
	go func() { ch <- status() }()
	select {
	case st := <-ch:
		if st == nil {
			return nil, errors.New("the supervision tree has stopped")
		}
		return st, nil
	case <-time.After(statusTimeout):
		return nil, fmt.Errorf("the supervisor did not answer within %v", statusTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// NotReady describes the runnables of st that are neither running and
// healthy nor done, e.g. "root.kubernetes.provisioner (backoff, 3 restarts)".
func NotReady(st []supervisor.NodeStatus) []string {
	var bad []string
	for _, n := range st {
		if n.State == "done" || (n.State == "running" && n.Healthy) {
			continue
		}
		state := n.State
		if n.State == "running" {
			state = "starting"
		}
		bad = append(bad, fmt.Sprintf("%s (%s, %d restarts)", n.DN, state, n.Restarts))
	}
	return bad
}

// Listen opens the endpoint's TCP listener on addr (host:port; port 0
// picks a free one), so that a bad address fails at start.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	return l, nil
}

// Serve serves h on l until ctx ends, then stops within a few seconds.
// The endpoint runs beside the supervision tree, not in it: it reports
// on the tree, and must answer while the tree restarts.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(l)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("metrics endpoint: %w", err)
}
