package main

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/scrape"
)

// operationsMetric is the kubelet's histogram of volume operations, by
// operation_name: "map_volume" is a block volume's mapping into a pod (the
// CSI NodePublishVolume and, upstream, the losetup pseudo-lock),
// "unmap_volume" its undoing.
const operationsMetric = "storage_operation_duration_seconds"

// kubeletOps reads the kubelet's successful volume operations named op,
// through the API server's proxy to the node.
func kubeletOps(ctx context.Context, client kubernetes.Interface, node, op string) (scrape.Totals, error) {
	s, err := scrape.Kubelet(ctx, client, node)
	if err != nil {
		return scrape.Totals{}, err
	}
	return successful(s, op), nil
}

// successful sums the successful operations named op in a scrape.
func successful(s scrape.Scrape, op string) scrape.Totals {
	return s.Sum(operationsMetric, map[string]string{"operation_name": op, "status": "success"})
}
