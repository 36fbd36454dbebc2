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

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/supervisor"
)

// TestTwoNodes: two plinth-node processes (two node names, two data
// directories) on one API server each provision exactly their own claims.
func TestTwoNodes(t *testing.T) {
	a := newEnv(t, true)
	b := *a
	b.node = a.node + "-b"
	b.dir = t.TempDir()
	b.vols = newVolumes(t, b.dir, true)
	bin, err := plinthNodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*env{a, &b} {
		p := &nodeProcess{t: t, bin: bin, log: filepath.Join(t.TempDir(), "plinth-node.log"), args: []string{
			"--root=" + filepath.Join(t.TempDir(), "node"),
			"--data-dir=" + e.dir,
			"--node-name=" + e.node,
			"--kubeconfig=" + cluster(t).NodeKubeconfig,
			"--allow-unenforced-capacity",
		}}
		p.start()
		t.Cleanup(func() {
			p.kill(syscall.SIGTERM)
			if t.Failed() {
				t.Logf("plinth-node %s log (tail):\n%s", e.node, p.logTail())
			}
		})
	}
	want := map[string][]string{a.node: nil, b.node: nil}
	for i := range 6 {
		node := a.node
		if i%2 == 1 {
			node = b.node
		}
		pvc := a.createClaim(claim{name: fmt.Sprintf("c%d", i), node: node})
		want[node] = append(want[node], volumeIDFor(pvc.UID))
	}
	for i := range 6 {
		_, pv := a.waitBound(fmt.Sprintf("c%d", i))
		h, _ := affinityHostname(pv)
		if !slices.Contains(want[h], pv.Name) {
			t.Errorf("PV %s has affinity to %q, which did not get that claim", pv.Name, h)
		}
	}
	for _, e := range []*env{a, &b} {
		slices.Sort(want[e.node])
		if got := e.volumeIDs(); !slices.Equal(got, want[e.node]) {
			t.Errorf("node %s has volumes %v, want %v", e.node, got, want[e.node])
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
		if _, err := e.vols.Create(ctx, id, volume.Filesystem, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	// An orphan: its claim was deleted before its PV was created.
	orphan := volumeIDFor(uuid.NewUUID())
	mkvol(orphan)
	// A volume whose claim still waits (its class does not exist yet).
	pending := e.createClaim(claim{name: "pending", class: "not-yet"})
	mkvol(volumeIDFor(pending.UID))
	// A volume with a PV but no claim (Retain after the claim went away),
	// and one whose PV lost our label (the informer does not see it).
	retained, unlabelled := volumeIDFor(uuid.NewUUID()), volumeIDFor(uuid.NewUUID())
	for _, id := range []string{retained, unlabelled} {
		mkvol(id)
		pv := buildPV(e.claimObject(claim{name: "gone"}), &request{id: id, class: testClass(), size: resource.MustParse("1Mi"),
			reclaim: corev1.PersistentVolumeReclaimRetain, mode: corev1.PersistentVolumeFilesystem}, names.DriverName, e.node, nodeLabelValue(e.node))
		if id == unlabelled {
			pv.Labels = nil
		}
		if _, err := e.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.client.CoreV1().PersistentVolumes().Delete(ctx, id, metav1.DeleteOptions{}) })
	}
	// Not ours: a stray file in the volumes directory.
	stray := filepath.Join(e.vols.Data.Volumes.FullPath(), "README")
	if err := os.WriteFile(stray, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}

	c := e.controller()
	c.OrphanGracePeriod = 2 * time.Second
	start := time.Now()
	e.start(c)
	eventually(t, 30*time.Second, "orphan removed", func() (bool, error) {
		return !slices.Contains(e.volumeIDs(), orphan), nil
	})
	if waited := time.Since(start); waited < c.OrphanGracePeriod {
		t.Errorf("orphan removed after %s, before the grace period of %s", waited, c.OrphanGracePeriod)
	}
	e.waitEvent(types.UID(e.node), ReasonOrphanDeleted, orphan)
	time.Sleep(2 * c.OrphanGracePeriod) // let a wrong removal happen
	got := e.volumeIDs()
	for _, id := range []string{volumeIDFor(pending.UID), retained, unlabelled} {
		if !slices.Contains(got, id) {
			t.Errorf("volume %s was removed although something refers to it", id)
		}
	}
	if !fileExists(stray) {
		t.Error("stray file in the volumes directory was removed")
	}
}

// TestRestartStartsClean: the supervisor restarts a failed controller by
// calling Run again on the same Controller; the new incarnation builds its
// own informers and queues and works (claims made while it was down are
// provisioned, released volumes deleted).
func TestRestartStartsClean(t *testing.T) {
	e := newEnv(t, true)
	c := e.controller()
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
	first := e.createClaim(claim{name: "first"})
	e.waitBound("first")
	close(crash)
	eventually(t, 10*time.Second, "controller restarted", func() (bool, error) { return runs.Load() >= 2, nil })
	e.createClaim(claim{name: "second"})
	e.waitBound("second")
	if err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "first volume deleted", func() (bool, error) {
		_, err := e.client.CoreV1().PersistentVolumes().Get(context.Background(), volumeIDFor(first.UID), metav1.GetOptions{})
		return apierrors.IsNotFound(err) && !slices.Contains(e.volumeIDs(), volumeIDFor(first.UID)), nil
	})
}

// TestBackoffHoldsAgainstUpdates: a claim that keeps failing (disk full) is
// retried with growing delays, however often the claim is updated.
func TestBackoffHoldsAgainstUpdates(t *testing.T) {
	e := newEnv(t, true)
	c := e.controller()
	c.RetryBase, c.RetryMax = time.Second, time.Minute
	e.start(c)
	pvc := e.createClaim(claim{name: "full", size: "1Pi", mode: corev1.PersistentVolumeBlock})
	e.waitEvent(pvc.UID, ReasonProvisioningFailed, "not enough space")
	// 40 updates over 4 s. Without backoff each would be an attempt; with
	// it, attempts come after 1, 2 (and 4) s: at most 4 in this window.
	ctx := context.Background()
	for i := range 40 {
		p, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["touch"] = fmt.Sprint(i)
		if _, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	countAttempts := func() int {
		n := 0
		for _, ev := range e.events(pvc.UID) {
			if ev.Reason == ReasonProvisioningFailed {
				n += int(ev.Count)
			}
		}
		return n
	}
	// Events are sent asynchronously; wait for the retries to show.
	eventually(t, 10*time.Second, "a retry's Event", func() (bool, error) { return countAttempts() >= 2, nil })
	attempts := countAttempts()
	if attempts < 2 || attempts > 5 {
		t.Errorf("%d provisioning attempts in ~5 s of updates; want 2..5 (exponential backoff from 1 s)", attempts)
	}
}
