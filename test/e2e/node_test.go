package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/launch"
)

// patchMarker is logged by the patched MapBlockVolume; see
// third_party/go/patches/kubelet-no-block-pseudo-locks.patch.
const patchMarker = "plinth-kubelet-no-block-pseudo-locks"

// upstreamAttachError is an error string only the unpatched MapBlockVolume has.
const upstreamAttachError = "blkUtil.AttachFileDevice failed"

func TestNodeReady(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	ready := false
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		t.Errorf("node %s is not Ready: %+v", c.NodeName, node.Status.Conditions)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
		t.Errorf("container runtime = %q, want containerd", rt)
	}
	// The cluster objects plinth-node relies on are in place.
	if _, err := c.Client.StorageV1().StorageClasses().Get(ctx, names.StorageClassName, metav1.GetOptions{}); err != nil {
		t.Errorf("StorageClass %s: %v", names.StorageClassName, err)
	}
	if _, err := c.Client.StorageV1().CSIDrivers().Get(ctx, names.DriverName, metav1.GetOptions{}); err != nil {
		t.Errorf("CSIDriver %s: %v", names.DriverName, err)
	}
	for _, tm := range c.Timings {
		t.Logf("start-up: %-24s at %5.1fs", tm.Phase, tm.At.Seconds())
	}
}

// TestRunningKubeletIsPatched proves that the kubelet serving the node is
// the build with kubelet-no-block-pseudo-locks: the version it reports to
// the API carries the hash of the patch in the repository, and the binary
// of the running process has the patch's marker and lacks the upstream code.
func TestRunningKubeletIsPatched(t *testing.T) {
	c := clusterFor(t)
	root, err := launch.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	patch, err := os.ReadFile(filepath.Join(root, "third_party/go/patches/kubelet-no-block-pseudo-locks.patch"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(patch)
	wantVersion := "+plinth." + hex.EncodeToString(sum[:])[:8]

	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; !strings.HasSuffix(v, wantVersion) {
		t.Errorf("node reports kubelet %q, want a version ending in %q (the patched build of this patch)", v, wantVersion)
	}

	pid := c.PID("kubelet")
	if pid == 0 {
		t.Fatal("no kubelet process")
	}
	exe, err := os.ReadFile(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("reading the running kubelet's binary: %v", err)
	}
	if !bytes.Contains(exe, []byte(patchMarker)) {
		t.Errorf("running kubelet (pid %d) lacks the patch marker %q", pid, patchMarker)
	}
	if bytes.Contains(exe, []byte(upstreamAttachError)) {
		t.Errorf("running kubelet (pid %d) still contains the upstream AttachFileDevice call", pid)
	}

	// The kubelet gets a PATH without losetup, so an unpatched kubelet
	// could not map block volumes at all (TestBlockVolumeWithoutLosetup).
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("reading kubelet environment: %v", err)
	}
	var path string
	for _, kv := range strings.Split(string(env), "\x00") {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p
		}
	}
	if path != c.KubeletPATH {
		t.Fatalf("kubelet PATH = %q, want %q", path, c.KubeletPATH)
	}
	cmd := exec.Command("sh", "-c", "command -v losetup")
	cmd.Env = []string{"PATH=" + path}
	if out, err := cmd.Output(); err == nil {
		t.Errorf("losetup is on the kubelet's PATH: %s", out)
	}
	if _, err := os.Stat(filepath.Join(path, "mount")); err != nil {
		t.Errorf("mount missing from the kubelet's PATH: %v", err)
	}
}

func TestPlainPod(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	const name = "plain-pod"
	pod := busyboxPod(name, "echo hello from a plinth node; sleep 3600")
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	t.Cleanup(func() { deletePod(t, c.Client, "default", name) })
	start := time.Now()
	if err := waitPodRunning(ctx, c.Client, "default", name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod running %.1fs after creation", time.Since(start).Seconds())
	// Logs come from the kubelet through the apiserver: this also proves
	// the apiserver trusts the kubelet's serving certificate and vice versa.
	var logs []byte
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		logs, err = c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil && bytes.Contains(logs, []byte("hello from a plinth node")) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod logs = %q, want the greeting", logs)
}
