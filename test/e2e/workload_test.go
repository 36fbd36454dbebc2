package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/resizer"
	"source.plinth.dev/pkg/mountinfo"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/e2e/workload"
	"source.plinth.dev/test/launch"
)

// workloadRuntimes are the settings TestWorkload runs in: every runtime
// of the cluster (runc, and gVisor where test-e2e provides it, always in
// CI). A runtime that cannot pass block devices into the pod gets
// SkipBlock, with its reason.
func workloadRuntimes(c *launch.Cluster) []workload.Runtime {
	var rts []workload.Runtime
	for _, r := range c.Runtimes() {
		rts = append(rts, workload.RuntimeOf(r))
	}
	return rts
}

// TestWorkload runs the test workload (test/e2e/persistentvolume) in a pod
// with four claims of the default StorageClass (filesystem, filesystem
// read-only, block, block read-only), under every runtime: the pod checks
// what it sees from inside, the suite grows every claim while it runs and
// the pod sees the new sizes, an infeasible resize is reported and
// recovered from, and deleting it all leaves nothing on the node or in the
// API.
func TestWorkload(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	for _, rt := range workloadRuntimes(c) {
		t.Run(rt.Name, func(t *testing.T) { testWorkload(t, c, rt) })
	}
}

func testWorkload(t *testing.T, c *launch.Cluster, rt workload.Runtime) {
	start := time.Now()
	ctx := context.Background()
	name := "e2e-workload-" + rt.Name
	// Never assumed: the launched node says whether it enforces quotas.
	spec := workload.NewSpec(name, rt, c.QuotaEnforced)
	pod, claims := spec.Pod, spec.Claims
	if rt.SkipBlock != "" {
		t.Logf("runtime %s: no block claims: %s", rt.Name, rt.SkipBlock)
	}
	ops := scrapeOps(t, c)
	pvcs := make([]*corev1.PersistentVolumeClaim, len(claims))
	for i, wc := range claims {
		pvcs[i] = createClaim(t, c, spec.PVCs[i].Name, wc.Mode, workload.Size)
	}
	runPod(t, c, pod, pvcs[0])
	pvs := make([]*corev1.PersistentVolume, len(claims))
	for i := range claims {
		pvs[i] = boundPV(t, c, pvcs[i].Name)
	}

	// The CSI plugin's own mounts of the filesystem claims are nosuid and
	// nodev, and read-only for the read-only claim, whatever the runtime
	// makes of them in the container.
	for i, wc := range claims {
		if wc.Mode == corev1.PersistentVolumeFilesystem {
			checkTargetOptions(t, pvs[i].Name, wc.ReadOnly)
		}
	}

	waitMarker(t, c, name, "[INIT-PASSED]", "[INIT-FAILED]", 2*time.Minute)
	for _, pvc := range pvcs {
		growClaim(t, c, pvc.Name, workload.ResizeTo)
	}
	// The workload gives up after its -resize-timeout and says so.
	logs := waitMarker(t, c, name, "[RESIZE-PASSED]", "[RESIZE-FAILED]", 2*time.Minute)
	inPod := countChecks(t, logs)
	// The suite's own: the two CSI targets' options, each claim grown
	// (capacity), then three for the
	// infeasible resize, two per claim in deleteClaim (PV gone, its
	// Event), and what assertNothingLeft counts.
	suite := 2 + len(claims) + infeasibleResize(t, c, pvcs[0].Name) + 2*len(claims)

	live, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deletePod(t, c.Client, "default", name)
	// With the pod gone the node has unpublished its claims: no loop device
	// serves a block claim any more, before the claims are deleted.
	for i, wc := range claims {
		if wc.Mode != corev1.PersistentVolumeBlock {
			continue
		}
		image := filepath.Join(c.DataDir, "volumes", pvs[i].Name+".img")
		await.For(t, t.Context(), 30*time.Second, "no loop device over "+image+" once the pod is gone", func() (bool, error) {
			loops := loopsOver(t, image)
			return len(loops) == 0, fmt.Errorf("bound: %v", loops)
		})
		suite++
	}
	for i := range claims {
		deleteClaim(t, c, pvcs[i], pvs[i])
	}
	suite += assertNothingLeft(t, c, live.UID, pvs)
	// Each claim was provisioned, published into the pod, grown,
	// unpublished and deleted: plinth-node's endpoint counts each.
	n := len(claims)
	suite += checkOpsSince(t, c, ops, map[string]int{"provision": n, "publish": n, "resize": n, "unpublish": n, "delete": n})
	t.Logf("runtime %s: %d checks in the pod, %d by the suite, %.1fs", rt.Name, inPod, suite, time.Since(start).Seconds())
}

// checkTargetOptions checks the options of the CSI plugin's bind mount of
// PV pv at the kubelet's target on the host.
func checkTargetOptions(t *testing.T, pv string, readOnly bool) {
	t.Helper()
	suffix := "/volumes/kubernetes.io~csi/" + pv + "/mount"
	opts, err := mountOptions(suffix)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nosuid", "nodev", "rw"}
	if readOnly {
		want[2] = "ro"
	}
	for _, o := range want {
		if !contains(strings.Split(opts, ","), o) {
			t.Errorf("CSI target *%s is mounted %q, want %s", suffix, opts, strings.Join(want, ","))
			return
		}
	}
}

// waitMarker waits until the pod's log has the pass line, and fails with
// the log when it has the fail line instead or neither comes in time.
func waitMarker(t *testing.T, c *launch.Cluster, pod, pass, fail string, timeout time.Duration) []byte {
	t.Helper()
	start := time.Now()
	logs, err := workload.WaitMarker(context.Background(), c.Client, "default", pod, pass, fail, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s: %s after %.1fs", pod, pass, time.Since(start).Seconds())
	return logs
}

// countChecks counts the workload's passed checks, logs the skipped ones
// (each says why) and fails on a failed one.
func countChecks(t *testing.T, logs []byte) int {
	t.Helper()
	n, skipped, failed := workload.Checks(logs)
	for _, l := range skipped {
		t.Logf("workload: %s", l)
	}
	for _, l := range failed {
		t.Errorf("workload: %s", l)
	}
	if n == 0 {
		t.Errorf("the workload's log has no passed check:\n%s", logs)
	}
	return n
}

// infeasibleResize asks for more than the data filesystem holds: the claim
// must get ControllerResizeInfeasible and a VolumeResizeFailed Event, and
// lowering the request must recover it. The API server refuses a lowered
// request that is not above the claim's capacity ("can not be less than
// status.capacity", also when equal), so the lowered request is one MiB
// above it, which the node must then grow to. Returns the number of checks.
func infeasibleResize(t *testing.T, c *launch.Cluster, claim string) int {
	t.Helper()
	ctx := context.Background()
	var st unix.Statfs_t
	if err := unix.Statfs(c.DataDir, &st); err != nil {
		t.Fatal(err)
	}
	tooBig := fmt.Sprintf("%dGi", int64(st.Blocks)*st.Bsize>>30+1)
	patchRequest(t, c, claim, tooBig)
	await.For(t, t.Context(), 30*time.Second, "claim "+claim+" to be ControllerResizeInfeasible at "+tooBig, func() (bool, error) {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
		return s == corev1.PersistentVolumeClaimControllerResizeInfeasible, fmt.Errorf("resize status %q", s)
	})
	await.For(t, t.Context(), 30*time.Second, "Event "+resizer.ReasonResizeFailed+" on claim "+claim, func() (bool, error) {
		return hasEvent(ctx, c, "PersistentVolumeClaim", claim, corev1.EventTypeWarning, resizer.ReasonResizeFailed)
	})

	patchRequest(t, c, claim, workload.RecoverTo)
	want := resource.MustParse(workload.RecoverTo)
	await.For(t, t.Context(), 30*time.Second, "claim "+claim+" to recover at "+workload.RecoverTo, func() (bool, error) {
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := pvc.Status.Capacity[corev1.ResourceStorage]
		_, resizing := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
		return got.Cmp(want) == 0 && !resizing, fmt.Errorf("capacity %s, resize statuses %v", got.String(), pvc.Status.AllocatedResourceStatuses)
	})
	return 3
}

// patchRequest sets a claim's storage request.
func patchRequest(t *testing.T, c *launch.Cluster, claim, size string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Patch(context.Background(), claim, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the request of claim %s to %s: %v", claim, size, err)
	}
}

// assertNothingLeft checks, after the pod and its claims are deleted, that
// nothing of them is left: no PV in the API, no volume directory or image
// in the data directory, no loop device bound to an image, no mount and no
// file (the CSI plugin's device nodes and targets, the kubelet's pod
// directory) under the kubelet's or the data directory that names a
// volume or the pod. The kubelet removes a deleted pod's directory on its
// own schedule, so the file and mount checks are waited for. Returns the
// number of checks.
func assertNothingLeft(t *testing.T, c *launch.Cluster, pod types.UID, pvs []*corev1.PersistentVolume) int {
	t.Helper()
	ctx := context.Background()
	keys := []string{string(pod)}
	checks := 0
	for _, pv := range pvs {
		keys = append(keys, pv.Name)
		if _, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err == nil {
			t.Errorf("PV %s exists after its claim was deleted", pv.Name)
		}
		for _, p := range []string{filepath.Join(c.DataDir, "volumes", pv.Name), filepath.Join(c.DataDir, "volumes", pv.Name+".img")} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s is left after its claim was deleted (%v)", p, err)
			}
		}
		checks += 3
	}
	for _, b := range bindings(t) {
		for _, pv := range pvs {
			if strings.HasPrefix(b.Backing, filepath.Join(c.DataDir, "volumes", pv.Name)) {
				t.Errorf("loop device %s is still bound to %s", b.Path(), b.Backing)
			}
		}
	}
	checks++
	await.For(t, t.Context(), time.Minute, "no mount or file naming the pod or its volumes", func() (bool, error) {
		left, err := leftovers(c, keys)
		if err != nil {
			return false, err
		}
		if len(left) > 0 {
			return false, fmt.Errorf("left: %s", strings.Join(left, "; "))
		}
		return true, nil
	})
	return checks + 1
}

// leftovers lists the mounts below the kubelet's and the data directory,
// and the files below the kubelet's directory, whose path names one of
// keys; device nodes are marked as such.
func leftovers(c *launch.Cluster, keys []string) ([]string, error) {
	names := func(p string) bool {
		for _, k := range keys {
			if strings.Contains(p, k) {
				return true
			}
		}
		return false
	}
	var left []string
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	// The kubelet's directory is below the data directory.
	for _, m := range mountinfo.Under(mounts, c.DataDir) {
		if names(m.MountPoint) || names(m.Root) {
			left = append(left, "mount "+m.MountPoint+" of "+m.Root)
		}
	}
	err = filepath.WalkDir(c.KubeletRootDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if !names(p) {
			return nil
		}
		if d.Type()&fs.ModeDevice != 0 {
			left = append(left, "device node "+p)
		} else {
			left = append(left, p)
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return left, err
}
