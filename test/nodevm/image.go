package nodevm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"source.plinth.dev/test/launch"
)

// DataDir is where a booted node keeps its data partition (plinth-node's
// tree with root "/"): volumes, the kubelet's root, containerd's. A pod's
// hostPath below it is on the node's data disk.
const DataDir = "/data"

// TestImage returns the node image's test variant (busybox and the e2e
// workload image in it), with the container images of extra (image
// archives) added, and the vmlinux it boots with: what `make run-vm` and
// `make test-e2e-vm` boot, built by build/scripts/nodeimage-test.sh or
// found in its cache. The benchmark programs on the VM node call it, so
// the image they measure is the one the tests prove.
func TestImage(ctx context.Context, extra ...string) (image, kernel string, err error) {
	repo, err := launch.RepoRoot(".")
	if err != nil {
		return "", "", err
	}
	var args []string
	for _, e := range extra {
		args = append(args, "-image", e)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "build/scripts/nodeimage-test.sh"), args...)
	cmd.Dir = repo
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("building the node image: %w", err)
	}
	var got []string
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		got = append(got, sc.Text())
	}
	if len(got) != 2 {
		return "", "", fmt.Errorf("nodeimage-test.sh printed %q, want the image and the kernel directory", out)
	}
	return got[0], filepath.Join(got[1], "vmlinux"), nil
}
