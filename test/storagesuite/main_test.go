// Package storagesuite runs Kubernetes' own external-storage end-to-end
// suite (e2e.test from k8s.io/kubernetes/test/e2e, focus External.Storage)
// against Plinth on the single-node cluster of test/launch, the way CSI
// drivers test themselves in their CI, and fails on any failed spec and on
// any skip that no missing capability of Plinth explains.
//
// Run it with `make test-storage-e2e` (as root). It needs what
// third_party/kubernetes/e2e/build.sh builds: e2e.test, the ginkgo CLI and
// agnhost, which is packed into the image the suite asks for (no registry is
// reachable, so every image it uses is built here and preloaded). Elsewhere
// the test skips unless PLINTH_STORAGE_SUITE=1.
package storagesuite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

const (
	// gateEnv turns the suite on; make test-storage-e2e sets it.
	gateEnv = "PLINTH_STORAGE_SUITE"
	// binEnv points at the output of third_party/kubernetes/e2e/build.sh;
	// without it the test runs that script (cached, seconds when warm).
	binEnv = "PLINTH_K8S_E2E_BIN"

	// The references k8s.io/kubernetes/test/utils/image gives the images
	// the storage specs run (v1.34: Agnhost is
	// promoterE2eRegistry/agnhost:2.56, BusyBox
	// promoterE2eRegistry/busybox:1.37.0-1). agnhost's tag is the VERSION
	// of the agnhost program build.sh built; checkImageRefs compares both
	// with what e2e.test itself lists.
	agnhostRepo = "registry.k8s.io/e2e-test-images/agnhost"
	busyboxRef  = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	// nginxRef is the image of the spec "should allow exec of files on the
	// volume", which only runs `/bin/sh -c` in it (write a script into the
	// volume, execute it, expect its `ls` output). The busybox image under
	// this name gives it that; nothing of nginx is used.
	nginxRef = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
)

// cluster is the one cluster of this test binary, with the suite's images.
var cluster *launch.Shared

func TestMain(m *testing.M) {
	cfg := launch.Config{PlinthNode: plinthNode()}
	var imageDir string
	if os.Getenv(gateEnv) == "1" {
		var err error
		imageDir, err = os.MkdirTemp("", "plinth-suite-images-")
		if err == nil {
			cfg.Images, err = suiteImages(context.Background(), imageDir)
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

// suiteBinaries returns the directory with e2e.test, ginkgo, agnhost and
// agnhost.version.
func suiteBinaries(ctx context.Context) (string, error) {
	if dir := os.Getenv(binEnv); dir != "" {
		return dir, nil
	}
	root, err := launch.RepoRoot(".")
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "third_party", "kubernetes", "e2e", "build.sh"))
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building e2e.test and agnhost: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// agnhostRef is the reference of the agnhost image built from bin.
func agnhostRef(bin string) (string, error) {
	v, err := os.ReadFile(filepath.Join(bin, "agnhost.version"))
	if err != nil {
		return "", fmt.Errorf("reading agnhost's version: %w", err)
	}
	return agnhostRepo + ":" + strings.TrimSpace(string(v)), nil
}

// suiteImages writes the agnhost and busybox images under the names the
// storage specs pull into dir and returns their archives for launch.Config.Images.
// The pods of the suite leave imagePullPolicy unset, which for a versioned
// tag means IfNotPresent: the kubelet uses a preloaded image and never
// reaches for the registry.
func suiteImages(ctx context.Context, dir string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	bin, err := suiteBinaries(ctx)
	if err != nil {
		return nil, err
	}
	ref, err := agnhostRef(bin)
	if err != nil {
		return nil, err
	}
	if err := checkImageRefs(ctx, filepath.Join(bin, "e2e.test"), ref, busyboxRef, nginxRef); err != nil {
		return nil, err
	}
	agnhost, err := images.Agnhost(ctx, ref, filepath.Join(bin, "agnhost"), images.DefaultBusybox)
	if err != nil {
		return nil, err
	}
	busybox, err := images.Busybox(ctx, images.DefaultBusybox)
	if err != nil {
		return nil, err
	}
	busybox.Ref = busyboxRef
	nginx := busybox
	nginx.Ref = nginxRef
	var paths []string
	for name, img := range map[string]images.Image{"agnhost": agnhost, "busybox": busybox, "nginx": nginx} {
		p := filepath.Join(dir, name+".tar")
		if err := img.WriteFile(p); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// checkImageRefs fails unless e2e.test lists each of refs among the images
// it uses (e2e.test -list-images): a reference that drifted with a new
// Kubernetes version would otherwise show up only as pods stuck pulling.
func checkImageRefs(ctx context.Context, e2eTest string, refs ...string) error {
	out, err := exec.CommandContext(ctx, e2eTest, "-list-images").Output()
	if err != nil {
		return fmt.Errorf("listing e2e.test's images: %w", err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		listed[l] = true
	}
	for _, r := range refs {
		if !listed[r] {
			return fmt.Errorf("e2e.test does not use image %s; its images are:\n%s", r, out)
		}
	}
	return nil
}
