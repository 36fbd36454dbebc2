// Package scrape reads the metrics of Kubernetes components for the
// benchmarks: one scrape in the Prometheus text format, then the sum of
// one metric's samples whose labels match. A benchmark takes two scrapes
// around what it measures and reports the difference, so what the
// component did is measured where the component counts it.
package scrape

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/kubernetes"
)

// Scrape is one reading of a component's metrics, by metric name.
type Scrape map[string]*dto.MetricFamily

// Parse reads a scrape in the Prometheus text format.
func Parse(r io.Reader) (Scrape, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return fams, nil
}

// Kubelet scrapes node's kubelet through the API server's proxy to the
// node, so it needs only the client's rights on nodes/proxy.
func Kubelet(ctx context.Context, c kubernetes.Interface, node string) (Scrape, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of node %s's kubelet: %w", node, err)
	}
	s, err := Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("node %s's kubelet: %w", node, err)
	}
	return s, nil
}

// APIServer scrapes the API server the client talks to.
func APIServer(ctx context.Context, c kubernetes.Interface) (Scrape, error) {
	body, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading kube-apiserver's metrics: %w", err)
	}
	s, err := Parse(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	return s, nil
}

// Endpoint scrapes a plain HTTP metrics endpoint at host:port (a
// plinth-node's --metrics-address).
func Endpoint(ctx context.Context, hostport string) (Scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostport+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics at %s: %w", hostport, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics at %s: %w", hostport, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the metrics at %s: %s", hostport, resp.Status)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the metrics at %s: %w", hostport, err)
	}
	return s, nil
}

// Totals are summed samples. For a histogram or summary, Count is the
// number of observations and Sum their sum; for a counter or gauge, Count
// is the number of series summed and Sum their values.
type Totals struct {
	Count uint64
	Sum   float64
}

// Minus is what happened between an earlier reading b and a.
func (a Totals) Minus(b Totals) Totals {
	return Totals{Count: a.Count - b.Count, Sum: a.Sum - b.Sum}
}

// Mean is the mean observation, 0 without any.
func (a Totals) Mean() float64 {
	if a.Count == 0 {
		return 0
	}
	return a.Sum / float64(a.Count)
}

// Sum adds up the samples of metric name whose labels include every pair
// of match (nil matches all).
func (s Scrape) Sum(name string, match map[string]string) Totals {
	var t Totals
	for _, m := range s.series(name, match) {
		t = t.plus(totals(m))
	}
	return t
}

// By sums metric name's matching samples per value of label.
func (s Scrape) By(name, label string, match map[string]string) map[string]Totals {
	out := map[string]Totals{}
	for _, m := range s.series(name, match) {
		v := labelValue(m, label)
		out[v] = out[v].plus(totals(m))
	}
	return out
}

func (a Totals) plus(b Totals) Totals {
	return Totals{Count: a.Count + b.Count, Sum: a.Sum + b.Sum}
}

// totals is one series as Totals: a histogram's or summary's observations,
// or a counter's, gauge's or untyped sample's value as one series.
func totals(m *dto.Metric) Totals {
	switch {
	case m.Histogram != nil:
		return Totals{Count: m.GetHistogram().GetSampleCount(), Sum: m.GetHistogram().GetSampleSum()}
	case m.Summary != nil:
		return Totals{Count: m.GetSummary().GetSampleCount(), Sum: m.GetSummary().GetSampleSum()}
	case m.Counter != nil:
		return Totals{Count: 1, Sum: m.GetCounter().GetValue()}
	case m.Gauge != nil:
		return Totals{Count: 1, Sum: m.GetGauge().GetValue()}
	case m.Untyped != nil:
		return Totals{Count: 1, Sum: m.GetUntyped().GetValue()}
	}
	return Totals{}
}

// series are metric name's samples whose labels include match.
func (s Scrape) series(name string, match map[string]string) []*dto.Metric {
	fam, ok := s[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range match {
			if labelValue(m, k) != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
