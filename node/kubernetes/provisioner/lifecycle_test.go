package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"source.plinth.dev/node/kubernetes/internal/controllertest"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/supervisor"
)

// TestTwoNodes: two plinth-node processes (two node names, two data
// directories) on one API server each provision exactly their own claims.
func TestTwoNodes(t *testing.T) {
	a := newEnv(t, true)
	bEnv := *a.Env
	b := env{Env: &bEnv}
	b.Node = a.Node + "-b"
	b.Dir = t.TempDir()
	b.Vols = controllertest.NewVolumes(t, b.Dir, true)
	bin, err := controllertest.PlinthNodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*env{a, &b} {
		p := &controllertest.NodeProcess{T: t, Bin: bin, Log: filepath.Join(t.TempDir(), "plinth-node.log"), Args: []string{
			"--root=" + filepath.Join(t.TempDir(), "node"),
			"--data-dir=" + e.Dir,
			"--node-name=" + e.Node,
			"--kubeconfig=" + controllertest.ControlPlane(t).NodeKubeconfig,
			"--allow-unenforced-capacity",
		}}
		p.Start()
		t.Cleanup(func() {
			p.Kill(syscall.SIGTERM)
			if t.Failed() {
				t.Logf("plinth-node %s log (tail):\n%s", e.Node, p.LogTail())
			}
		})
	}
	want := map[string][]string{a.Node: nil, b.Node: nil}
	for i := range 6 {
		node := a.Node
		if i%2 == 1 {
			node = b.Node
		}
		pvc := a.CreateClaim(controllertest.Claim{Name: fmt.Sprintf("c%d", i), Node: node})
		want[node] = append(want[node], ownership.VolumeIDFor(pvc.UID))
	}
	for i := range 6 {
		_, pv := a.WaitBound(fmt.Sprintf("c%d", i))
		h, _ := ownership.AffinityHostname(pv)
		if !slices.Contains(want[h], pv.Name) {
			t.Errorf("PV %s has affinity to %q, which did not get that claim", pv.Name, h)
		}
	}
	for _, e := range []*env{a, &b} {
		slices.Sort(want[e.Node])
		if got := e.VolumeIDs(); !slices.Equal(got, want[e.Node]) {
			t.Errorf("node %s has volumes %v, want %v", e.Node, got, want[e.Node])
		}
	}
}

// TestOrphans: volumes nothing refers to are removed after the grace
// period; volumes a claim or PV refers to, and things that are not our
// volumes, are kept.
func TestOrphans(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	mkvol := func(id string) {
		t.Helper()
		if _, err := e.Vols.Create(ctx, id, volume.Filesystem, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	// An orphan: its claim was deleted before its PV was created.
	orphan := ownership.VolumeIDFor(uuid.NewUUID())
	mkvol(orphan)
	// A volume whose claim still waits (its class does not exist yet).
	pending := e.CreateClaim(controllertest.Claim{Name: "pending", Class: "not-yet"})
	mkvol(ownership.VolumeIDFor(pending.UID))
	// A volume with a PV but no claim (Retain after the claim went away),
	// and one whose PV lost our label (the informer does not see it).
	retained, unlabelled := ownership.VolumeIDFor(uuid.NewUUID()), ownership.VolumeIDFor(uuid.NewUUID())
	for _, id := range []string{retained, unlabelled} {
		mkvol(id)
		pv := buildPV(e.ClaimObject(controllertest.Claim{Name: "gone"}), &request{id: id, class: testClass(), size: resource.MustParse("1Mi"),
			reclaim: corev1.PersistentVolumeReclaimRetain, mode: corev1.PersistentVolumeFilesystem}, names.DriverName, e.Node, ownership.NodeLabelValue(e.Node))
		if id == unlabelled {
			pv.Labels = nil
		}
		if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Client.CoreV1().PersistentVolumes().Delete(ctx, id, metav1.DeleteOptions{}) })
	}
	// Not ours: a stray file in the volumes directory.
	stray := filepath.Join(e.Vols.Data.Volumes.FullPath(), "README")
	if err := os.WriteFile(stray, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}

	c := e.controller()
	c.OrphanGracePeriod = 2 * time.Second
	start := time.Now()
	e.start(c)
	controllertest.Eventually(t, 30*time.Second, "orphan removed", func() (bool, error) {
		return !slices.Contains(e.VolumeIDs(), orphan), nil
	})
	if waited := time.Since(start); waited < c.OrphanGracePeriod {
		t.Errorf("orphan removed after %s, before the grace period of %s", waited, c.OrphanGracePeriod)
	}
	e.WaitEvent(types.UID(e.Node), ReasonOrphanDeleted, orphan)
	time.Sleep(2 * c.OrphanGracePeriod) // let a wrong removal happen
	got := e.VolumeIDs()
	for _, id := range []string{ownership.VolumeIDFor(pending.UID), retained, unlabelled} {
		if !slices.Contains(got, id) {
			t.Errorf("volume %s was removed although something refers to it", id)
		}
	}
	if !controllertest.FileExists(stray) {
		t.Error("stray file in the volumes directory was removed")
	}
}

// TestRestartStartsClean: the supervisor restarts a failed controller by
// calling Run again on the same Controller; the new incarnation builds its
// own informers and queues and works (claims made while it was down are
// provisioned, released volumes deleted).
func TestRestartStartsClean(t *testing.T) {
	e := newEnv(t, true)
	c := e.newController(e.controller())
	var runs atomic.Int32
	crash := make(chan struct{})
	supervisor.TestHarness(t, func(ctx context.Context) error {
		if runs.Add(1) == 1 {
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-crash:
				case <-ctx.Done():
				}
				cancel()
			}()
			_ = c.Run(cctx)
			return errors.New("simulated crash")
		}
		return c.Run(ctx)
	}, supervisor.WithBackoff(time.Second, time.Second))
	first := e.CreateClaim(controllertest.Claim{Name: "first"})
	e.WaitBound("first")
	close(crash)
	controllertest.Eventually(t, 10*time.Second, "controller restarted", func() (bool, error) { return runs.Load() >= 2, nil })
	e.CreateClaim(controllertest.Claim{Name: "second"})
	e.WaitBound("second")
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 60*time.Second, "first volume deleted", func() (bool, error) {
		_, err := e.Client.CoreV1().PersistentVolumes().Get(context.Background(), ownership.VolumeIDFor(first.UID), metav1.GetOptions{})
		return apierrors.IsNotFound(err) && !slices.Contains(e.VolumeIDs(), ownership.VolumeIDFor(first.UID)), nil
	})
}

// TestBackoffHoldsAgainstUpdates: a claim that keeps failing (disk full) is
// retried with growing delays, however often the claim is updated.
func TestBackoffHoldsAgainstUpdates(t *testing.T) {
	e := newEnv(t, true)
	c := e.controller()
	c.RetryBase, c.RetryMax = time.Second, time.Minute
	e.start(c)
	pvc := e.CreateClaim(controllertest.Claim{Name: "full", Size: "1Pi", Mode: corev1.PersistentVolumeBlock})
	e.WaitEvent(pvc.UID, ReasonProvisioningFailed, "not enough space")
	// 40 updates over 4 s. Without backoff each would be an attempt; with
	// it, attempts come after 1, 2 (and 4) s: at most 4 in this window.
	ctx := context.Background()
	for i := range 40 {
		p, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["touch"] = fmt.Sprint(i)
		if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Update(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	countAttempts := func() int {
		n := 0
		for _, ev := range e.Events(pvc.UID) {
			if ev.Reason == ReasonProvisioningFailed {
				n += int(ev.Count)
			}
		}
		return n
	}
	// Events are sent asynchronously; wait for the retries to show.
	controllertest.Eventually(t, 10*time.Second, "a retry's Event", func() (bool, error) { return countAttempts() >= 2, nil })
	attempts := countAttempts()
	if attempts < 2 || attempts > 5 {
		t.Errorf("%d provisioning attempts in ~5 s of updates; want 2..5 (exponential backoff from 1 s)", attempts)
	}
}
