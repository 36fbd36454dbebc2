// Package storagesuite runs Kubernetes' own external-storage end-to-end
// suite (e2e.test from k8s.io/kubernetes/test/e2e, focus External.Storage)
// against Plinth on the single-node cluster of test/launch, the way CSI
// drivers test themselves in their CI, and fails on any failed spec and on
// any skip that no missing capability of Plinth explains.
//
// Run it with `make test-storage-e2e` (as root). It needs what
// third_party/kubernetes/e2e/build.sh builds: e2e.test, the ginkgo CLI and
// agnhost, which is packed into the image the suite asks for (no registry is
// reachable, so every image it uses is built here and preloaded; package
// suite holds the driver definition, the images and the run, which
// test/e2evm shares). Elsewhere the test skips unless PLINTH_STORAGE_SUITE=1.
package storagesuite

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/storagesuite/suite"
)

// gateEnv turns the suite on; make test-storage-e2e sets it.
const gateEnv = "PLINTH_STORAGE_SUITE"

// cluster is the one cluster of this test binary, with the suite's images.
var cluster *launch.Shared

func TestMain(m *testing.M) {
	cfg := launch.Config{PlinthNode: plinthNode()}
	var imageDir string
	if os.Getenv(gateEnv) == "1" {
		var err error
		imageDir, err = os.MkdirTemp("", "plinth-suite-images-")
		if err == nil {
			cfg.Images, err = suiteImages(imageDir)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: preparing the suite's images: %v\n", err)
			os.Exit(1)
		}
	}
	cluster = launch.NewShared(cfg)
	code := cluster.Run(m)
	if imageDir != "" {
		os.RemoveAll(imageDir)
	}
	os.Exit(code)
}

// suiteImages writes the suite's images into dir (see suite.Images).
func suiteImages(dir string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := suite.Binaries(ctx)
	if err != nil {
		return nil, err
	}
	return suite.Images(ctx, bin, dir)
}

// plinthNode runs the plinth-node binary that the make target builds.
func plinthNode() *launch.PlinthNode {
	if bin := os.Getenv("PLINTH_NODE_BIN"); bin != "" {
		return &launch.PlinthNode{Binary: bin}
	}
	return nil
}

// clusterFor returns the cluster, or skips outside make test-storage-e2e.
func clusterFor(t *testing.T) *launch.Cluster {
	t.Helper()
	if os.Getenv(gateEnv) != "1" {
		t.Skipf("Kubernetes' storage suite: run with make test-storage-e2e (%s=1)", gateEnv)
	}
	if os.Getenv("PLINTH_NODE_BIN") == "" {
		t.Fatal("PLINTH_NODE_BIN is not set: the suite tests plinth-node, which must run on the node")
	}
	return cluster.Cluster(t)
}
