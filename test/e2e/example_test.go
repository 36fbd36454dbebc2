package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/resizer"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/launch"
)

// TestMakeRunExample applies the example `make run` prints, with kubectl as
// a user would: the claim binds, the pod runs and writes to the volume,
// growing the claim with kubectl patch shows the new capacity in kubectl,
// and deleting both removes the PV and the volume's directory.
func TestMakeRunExample(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "example.yaml")
	if err := os.WriteFile(file, []byte(launch.ExampleYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	start := time.Now()
	kubectl("apply", "-f", file)
	t.Cleanup(func() {
		_ = exec.Command(filepath.Join(c.BinDir, "kubectl"), "--kubeconfig", c.Kubeconfig,
			"delete", "--ignore-not-found", "--grace-period=1", "-f", file).Run()
	})
	if err := waitPodRunning(ctx, c.Client, "default", "example", 2*time.Minute); err != nil {
		t.Fatalf("%v; claim events: %s", err, await.Events(ctx, c.Client, "default", "example"))
	}
	t.Logf("example pod running %.1fs after kubectl apply", time.Since(start).Seconds())
	if got := kubectl("get", "pvc", "example", "-o", "jsonpath={.status.phase}"); got != "Bound" {
		t.Fatalf("example claim is %q, want Bound", got)
	}
	waitLogs(t, c, "example", "/data")
	pvName := kubectl("get", "pvc", "example", "-o", "jsonpath={.spec.volumeName}")
	logFile := filepath.Join(c.DataDir, "volumes", pvName, "log")
	await.For(t, t.Context(), 30*time.Second, "the example's log file "+logFile, func() (bool, error) {
		data, err := os.ReadFile(logFile)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return len(data) > 0, err
	})

	readmeRestore(t, c, kubectl, logFile)

	// The user grows the claim, as the README tells them to, and sees the
	// new size in kubectl: the claim's capacity, the PV's, and an Event.
	kubectl("patch", "pvc", "example", "-p", `{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	await.For(t, t.Context(), 30*time.Second, "the example claim's capacity to be 2Gi", func() (bool, error) {
		return kubectl("get", "pvc", "example", "-o", "jsonpath={.status.capacity.storage}") == "2Gi", nil
	})
	if got := kubectl("get", "pv", pvName, "-o", "jsonpath={.spec.capacity.storage}"); got != "2Gi" {
		t.Errorf("example PV capacity %q after the resize, want 2Gi", got)
	}
	if got := kubectl("get", "pvc", "example", "-o", "jsonpath={.status.allocatedResourceStatuses}"); got != "" {
		t.Errorf("example claim still has resize statuses %s", got)
	}
	await.For(t, t.Context(), 30*time.Second, "Event "+resizer.ReasonResizeSuccess+" on the example claim", func() (bool, error) {
		return hasEvent(ctx, c, "PersistentVolumeClaim", "example", corev1.EventTypeNormal, resizer.ReasonResizeSuccess)
	})

	kubectl("delete", "--grace-period=1", "-f", file)
	await.For(t, t.Context(), time.Minute, "PV "+pvName+" to be deleted", func() (bool, error) {
		_, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if _, err := os.Stat(filepath.Dir(logFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("example volume directory after kubectl delete: %v", err)
	}
}

// readmeRestore does what the README's "Snapshots, restores and clones"
// shows, with its very text and kubectl: snapshot the example claim in
// use (the default VolumeSnapshotClass) and restore it into claim
// "restored", whose pod must read the example's log as the snapshot has
// it. Both are deleted again.
func readmeRestore(t *testing.T, c *launch.Cluster, kubectl func(...string) string, logFile string) {
	t.Helper()
	root, err := launch.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "    kubectl apply -f - <<EOF\n")
	snippet, _, ok2 := strings.Cut(rest, "    EOF\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no `kubectl apply -f - <<EOF` example")
	}
	file := filepath.Join(t.TempDir(), "restore.yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll("\n"+snippet, "\n    ", "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", file)
	pod := busyboxPod("restored-reader", "cat /data/log; sleep 3600")
	mountClaim(pod, "restored", false)
	if _, err := c.Client.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitPodRunning(t.Context(), c.Client, "default", pod.Name, 2*time.Minute); err != nil {
		t.Fatalf("%v; claim events: %s", err, await.Events(t.Context(), c.Client, "default", "restored"))
	}
	waitLogs(t, c, pod.Name, strings.TrimSpace(string(want)))
	ready := kubectl("get", "volumesnapshot", "example", "-o", "jsonpath={.status.readyToUse} {.spec.volumeSnapshotClassName}")
	t.Logf("README's restore: the pod of claim restored reads the example's log; VolumeSnapshot example (readyToUse, class): %s", ready)
	if ready != "true local" {
		t.Errorf("VolumeSnapshot example: readyToUse and class %q, want \"true local\" (the default class)", ready)
	}
	deletePod(t, c.Client, "default", pod.Name)
	kubectl("delete", "-f", file)
}
