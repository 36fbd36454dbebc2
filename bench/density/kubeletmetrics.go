package main

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/kubernetes"
)

// operationsMetric is the kubelet's histogram of volume operations, by
// operation_name: "map_volume" is a block volume's mapping into a pod (the
// CSI NodePublishVolume and, upstream, the losetup pseudo-lock),
// "unmap_volume" its undoing.
const operationsMetric = "storage_operation_duration_seconds"

// opTotals are a histogram's sample count and sum.
type opTotals struct {
	count uint64
	sum   float64
}

// mean is the mean operation's time in seconds, 0 without operations.
func (a opTotals) mean() float64 {
	if a.count == 0 {
		return 0
	}
	return a.sum / float64(a.count)
}

func (a opTotals) minus(b opTotals) opTotals {
	return opTotals{count: a.count - b.count, sum: a.sum - b.sum}
}

// kubeletOps reads the kubelet's successful volume operations named op,
// through the API server's proxy to the node.
func kubeletOps(ctx context.Context, client kubernetes.Interface, node, op string) (opTotals, error) {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return opTotals{}, fmt.Errorf("reading the kubelet's metrics: %w", err)
	}
	return parseOps(bytes.NewReader(body), op)
}

// parseOps sums the successful operations named op in a text scrape.
func parseOps(r io.Reader, op string) (opTotals, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return opTotals{}, fmt.Errorf("parsing the kubelet's metrics: %w", err)
	}
	var t opTotals
	fam, ok := fams[operationsMetric]
	if !ok {
		return t, nil // no operation yet
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["operation_name"] != op || labels["status"] != "success" {
			continue
		}
		t.count += m.GetHistogram().GetSampleCount()
		t.sum += m.GetHistogram().GetSampleSum()
	}
	return t, nil
}
