package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/e2e/loopreuse"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// TestLoopDetachInPodLeaksNoVolume is issue 34: a pod runs `losetup -d` on
// its own block claim's device, and the next block claim published on the
// node must not become readable through the device node that pod keeps
// (loopreuse.Run). Four ways: the detach before the next claim exists,
// the detach while it is being published, a plinth-node restart between
// the detach and the next claim, with a lower loop number freed meanwhile
// (another pod ended), so that a restart re-binding the detached image at
// the lowest free number instead of its own hands its number on, and a
// kubelet restart there (which calls NodePublishVolume again).
// Not parallel: the restart must not hit other tests, and their volumes
// would take the freed numbers. Pod A has CAP_SYS_ADMIN, as the host
// node's runc wrapper refuses the detach to any pod without it
// (TestPodCannotDetachItsLoopDevice): this tests the wall behind.
func TestLoopDetachInPodLeaksNoVolume(t *testing.T) {
	c := clusterFor(t)
	node := func() string { return volumeLoops(c) }
	for _, v := range []struct {
		name string
		opts loopreuse.Options
	}{
		{"plain", loopreuse.Options{}},
		{"during", loopreuse.Options{DetachDuringPublish: true}},
		{"restart", loopreuse.Options{FreeLowerNumber: true, AfterDetach: func(t testing.TB) { restartPlinthNode(t, c) }}},
		{"kubelet", loopreuse.Options{FreeLowerNumber: true, AfterDetach: func(t testing.TB) { restartKubelet(t, c) }}},
	} {
		t.Run(v.name, func(t *testing.T) {
			v.opts.Name = "e2e-loopreuse-" + v.name
			v.opts.SysAdmin = true
			v.opts.Node = node
			loopreuse.Run(t, t.Context(), c.Client, "default", images.BusyboxRef, v.opts)
		})
	}
}

// restartPlinthNode kills plinth-node and starts it again, and waits until
// it says it is ready (its CSI plugin has reconciled its publications).
func restartPlinthNode(t testing.TB, c *launch.Cluster) {
	t.Helper()
	if err := c.Kill("plinth-node"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Restart("plinth-node"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	await.For(t, ctx, time.Minute, "plinth-node ready after its restart", func() (bool, error) {
		resp, err := http.Get("http://" + c.PlinthNodeMetrics + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("/readyz: %s", resp.Status)
	})
	t.Logf("plinth-node killed and ready again %.1fs later; node: %s", time.Since(start).Seconds(), volumeLoops(c))
}

// restartKubelet kills the kubelet and starts it again, and waits until
// the node is Ready.
func restartKubelet(t testing.TB, c *launch.Cluster) {
	t.Helper()
	if err := c.Kill("kubelet"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Restart("kubelet"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	await.For(t, ctx, 2*time.Minute, "node Ready after the kubelet's restart", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(start) {
				return true, nil
			}
		}
		return false, fmt.Errorf("no Ready heartbeat since the restart")
	})
	t.Logf("kubelet killed and Ready again %.1fs later; node: %s", time.Since(start).Seconds(), volumeLoops(c))
}

// volumeLoops lists the loop devices over the node's volume images.
func volumeLoops(c *launch.Cluster) string {
	all, err := loop.Bindings()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, b := range all {
		if strings.HasPrefix(b.Backing, filepath.Join(c.DataDir, "volumes")+"/") {
			out = append(out, fmt.Sprintf("%s over %s", b.Path(), filepath.Base(b.Backing)))
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// TestPodCannotDetachItsLoopDevice is the loop half of issue 37 on the
// host node (`make run`'s): runc runs through plinth-node's wrapper
// (package runcguard), so a pod without CAP_SYS_ADMIN that runs
// `losetup -d` on its own block claim's device gets EPERM, under no
// seccomp profile and under RuntimeDefault (loopreuse.DetachRefused).
func TestPodCannotDetachItsLoopDevice(t *testing.T) {
	c := clusterFor(t)
	for _, l := range loopreuse.DetachRefused(t, t.Context(), c.Client, "default", images.BusyboxRef, "e2e-detach") {
		t.Log(l)
	}
}
