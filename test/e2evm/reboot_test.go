package e2evm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/nodevm"
)

// TestVolumesSurviveReboot reboots the node twice under a running pod with
// a filesystem and two block claims: once cleanly, once by cutting the
// power. Each time the pod comes back on the same node, and what it wrote
// before is what it reads after, through fresh loop devices.
func TestVolumesSurviveReboot(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "reboot")
	cs := w.cp.Client

	for _, c := range nodevm.ProbeClaims() {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	markers := nodevm.ProbeMarkers{FS: "fs-" + token(t), A: "blka-" + token(t), B: "blkb-" + token(t)}
	pod := nodevm.ProbePod("survivor", markers, true)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitLog(ctx, w, ns, pod.Name, "WROTE", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	found := markers.Found()

	for _, how := range []string{"clean", "power cut"} {
		t.Logf("rebooting the node (%s)", how)
		var err error
		if how == "clean" {
			err = w.node.Stop(ctx, 3*time.Minute)
		} else {
			err = w.node.PowerCut()
		}
		if err != nil {
			t.Fatalf("stopping the node (%s): %v", how, err)
		}
		start := time.Now()
		if err := w.node.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.node.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("node Ready %.1fs after the %s reboot", time.Since(start).Seconds(), how)
		// WaitReady waited for the node to show a new boot ID.
		node, err := cs.CoreV1().Nodes().Get(ctx, w.node.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		prefix := nodevm.FoundPrefix(node.Status.NodeInfo.BootID)
		line, err := waitLog(ctx, w, ns, pod.Name, prefix, 5*time.Minute)
		if err != nil {
			t.Fatalf("after the %s reboot: %v", how, err)
		}
		if want := prefix + found; line != want {
			t.Errorf("after the %s reboot the pod read %q, want %q", how, line, want)
		}
	}
}

func token(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func ptr[T any](v T) *T { return &v }

// newNamespace creates a namespace for one test and deletes it (and so its
// claims and pods) afterwards.
func newNamespace(t *testing.T, w *world, prefix string) string {
	t.Helper()
	ns, err := w.cp.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// waitLog is nodevm.WaitLog on the world's control plane, without
// timestamps.
func waitLog(ctx context.Context, w *world, ns, pod, prefix string, timeout time.Duration) (string, error) {
	return nodevm.WaitLog(ctx, w.cp.Client, ns, pod, prefix, false, timeout)
}
