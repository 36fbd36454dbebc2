// Package metricstest reads metrics the way Prometheus does, for tests
// that check counts against what they did: it scrapes an endpoint and
// parses the text format (or gathers a registry) and sums series by name
// and labels.
package metricstest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Families are metric families by name.
type Families map[string]*dto.MetricFamily

// Scrape is one scrape of a /metrics URL: its families and the size of
// the response.
type Scrape struct {
	Families Families
	Bytes    int
	Took     time.Duration
}

// Get scrapes url (e.g. http://127.0.0.1:9100/metrics) and parses the
// response.
func Get(url string) (*Scrape, error) {
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s: %s", url, resp.Status, body)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing the scrape of %s: %w", url, err)
	}
	return &Scrape{Families: fams, Bytes: len(body), Took: took}, nil
}

// Gather reads g as a scrape would, without HTTP.
func Gather(g prometheus.Gatherer) (Families, error) {
	fs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := Families{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out, nil
}

// Value sums the series of family name whose labels include labels
// (given as name, value pairs): a counter's or gauge's value, a
// histogram's sample count. A missing family or series counts 0, as it
// does for Prometheus before the first event.
func (f Families) Value(name string, labels ...string) float64 {
	fam, ok := f[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		if !matches(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum
}

func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
