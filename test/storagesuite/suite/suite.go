// Package suite is what runs Kubernetes' external-storage e2e suite
// (e2e.test from k8s.io/kubernetes/test/e2e) against Plinth, wherever the
// cluster is: Plinth's driver definition, the suite's binaries and images,
// one ginkgo run and its report. test/storagesuite runs the whole suite on
// the host cluster of test/launch; test/e2evm runs the specs the host
// cannot (see the skip list of test/storagesuite) on the VM node.
package suite

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// testDriver declares Plinth's capabilities to the suite.
//
//go:embed testdriver.yaml
var testDriver []byte

// WriteDriver writes Plinth's driver definition to path, for
// -storage.testdriver.
func WriteDriver(path string) error {
	if err := os.WriteFile(path, testDriver, 0o644); err != nil {
		return fmt.Errorf("writing the driver definition: %w", err)
	}
	return nil
}

// BinEnv points at the output of third_party/kubernetes/e2e/build.sh;
// without it Binaries runs that script (cached, seconds when warm).
const BinEnv = "PLINTH_K8S_E2E_BIN"

const (
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

// Binaries returns the directory with e2e.test, ginkgo, agnhost and
// agnhost.version: $PLINTH_K8S_E2E_BIN, or what build.sh prints.
func Binaries(ctx context.Context) (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
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

// Images writes the agnhost and busybox images under the names the
// storage specs pull into dir, as docker-archive tarballs named suite-*.tar
// (not to collide with a node's own busybox.tar), and returns their paths:
// for launch.Config.Images on the host, for the node image's -image on a
// VM node. The pods of the suite leave imagePullPolicy unset, which for a
// versioned tag means IfNotPresent: the kubelet uses a preloaded image and
// never reaches for the registry.
func Images(ctx context.Context, bin, dir string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
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
	for _, img := range []struct {
		name  string
		image images.Image
	}{{"agnhost", agnhost}, {"busybox", busybox}, {"nginx", nginx}} {
		p := filepath.Join(dir, "suite-"+img.name+".tar")
		if err := img.image.WriteFile(p); err != nil {
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
