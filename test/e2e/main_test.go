// Package e2e tests Plinth against a real single-node cluster started by
// test/launch: kubelet (the patched build), containerd, the control plane
// and plinth-node. Run with `make test-e2e` (as root); elsewhere the tests
// skip unless PLINTH_E2E=1.
package e2e

import (
	"os"
	"testing"

	"source.plinth.dev/test/launch"
)

// cluster is shared by all tests of this package (one launch per run).
// gVisor is configured when test-e2e.sh provides its binaries.
var cluster = launch.NewShared(launch.Config{PlinthNode: plinthNode(), GVisorBin: os.Getenv(launch.GVisorBinEnv)})

func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }

// plinthNode runs the plinth-node binary that test-e2e.sh builds. It
// checks the volumes' health every second, so that TestVolumeHealthEvents
// sees damage reported quickly.
func plinthNode() *launch.PlinthNode {
	if bin := os.Getenv("PLINTH_NODE_BIN"); bin != "" {
		return &launch.PlinthNode{Binary: bin, Args: func(p launch.Paths) []string {
			return append(launch.PlinthNodeArgs(p), "--volume-health-interval=1s")
		}}
	}
	return nil
}

// clusterFor returns the shared cluster, or skips outside `make test-e2e`.
// (test-unit runs every package too; a cluster launch belongs to test-e2e.)
func clusterFor(t *testing.T) *launch.Cluster {
	t.Helper()
	if os.Getenv("PLINTH_E2E") != "1" {
		t.Skip("cluster test: run with make test-e2e (PLINTH_E2E=1)")
	}
	if os.Getenv("CI") == "true" && os.Getenv("PLINTH_NODE_BIN") == "" {
		t.Fatal("PLINTH_NODE_BIN is not set: CI must test with plinth-node running")
	}
	return cluster.Cluster(t)
}
