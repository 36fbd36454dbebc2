package e2evm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/nodevm"
)

// shareClaimSize is the claim the filling pod must not take room from,
// and the size of a second claim of the claimant's that nothing writes:
// each a few percent of the VM's 2 GiB data disk. With the node share
// full and the first claim written, what is left free is the second
// claim's promised room, above the kubelet's 1% eviction threshold, so
// that the node never comes under disk pressure (whose reclaim would
// delete the images later tests run, and whose condition the kubelet
// keeps for 5 minutes after it ends).
const (
	shareClaimSize  = "64Mi"
	shareClaimBytes = 64 << 20
)

// fillerScript fills the pod's emptyDir until a write fails, keeps it full
// for HOLD seconds, then frees it and says how far it got (busybox dd's
// report, error included). Keeping it full means writing again each
// second, 4 KiB at a time, into whatever room came free: the claimant's
// probe may hold a MiB of room at the instant the first dd fails, and once
// the probe deletes it the share would otherwise stay 1 MiB short of full
// for the whole hold, every probe succeeding: the claimant would never see
// the share full, as in session 31's landing CI. Nothing is written to a
// log meanwhile: while the node share is full, so is the container's
// writable layer, and the container log, which is why the report waits
// until the end.
const fillerScript = `r=$(dd if=/dev/zero of=/scratch/fill bs=1M conv=fsync 2>&1)
i=0
while [ "$i" -lt "$HOLD" ]; do
  dd if=/dev/zero of=/scratch/top.$i bs=4k conv=fsync 2>/dev/null
  i=$((i + 1))
  sleep 1
done
rm -f /scratch/fill /scratch/top.*
echo "[FILLED] $r" | tr '\n' ' '
echo
exec sleep 1000000`

// claimantScript waits until its own emptyDir cannot take 1 MiB more
// (the room outside volumes is gone), then writes its whole claim; it
// reports once its emptyDir has room again (the filler freed it), since
// a full node share also stops the container's log.
const claimantScript = `echo READY
until ! dd if=/dev/zero of=/scratch/probe bs=1M count=1 conv=fsync 2>/dev/null; do rm -f /scratch/probe; sleep 1; done
rm -f /scratch/probe
full=$(df -k /scratch | tail -1)
if r=$(dd if=/dev/zero of=/claim/data bs=1M count=$((BYTES >> 20)) conv=fsync 2>&1); then res="[CLAIM-WRITTEN] $r"; else res="[CLAIM-FAILED] $r"; fi
until dd if=/dev/zero of=/scratch/probe bs=1M count=1 conv=fsync 2>/dev/null; do rm -f /scratch/probe; sleep 1; done
rm -f /scratch/probe
echo "emptyDir full: $full"
echo "$res" | tr '\n' ' '
echo
exec sleep 1000000`

// fillerHold is how long the filler keeps its emptyDir full: long enough
// for the claimant to notice (it looks every second) and write its claim.
const fillerHold = "90"

// TestFullEmptyDirLeavesClaimsTheirRoom is issue 37's "filling the node",
// from inside the pods: one pod fills its emptyDir (on the data partition,
// in the kubelet's root) until a write fails; another pod, running on the
// same node with a filesystem claim, then writes its claim's whole size,
// which must succeed. Without the node share's quota the emptyDir takes
// the free space the claim was promised and the claim's write fails with
// ENOSPC within its size.
func TestFullEmptyDirLeavesClaimsTheirRoom(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "share")
	cs := w.cp.Client
	for _, name := range []string{"claim", "spare"} {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, nodevm.Claim(name, corev1.PersistentVolumeFilesystem, shareClaimSize), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claimant := sharePod("claimant", claimantScript)
	c := &claimant.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "BYTES", Value: fmt.Sprint(shareClaimBytes)}}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "claim", MountPath: "/claim"}, corev1.VolumeMount{Name: "spare", MountPath: "/spare"})
	claimant.Spec.Volumes = append(claimant.Spec.Volumes, nodevm.ClaimVolume("claim"), nodevm.ClaimVolume("spare"))
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, claimant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitLog(ctx, w, ns, claimant.Name, "READY", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	filler := sharePod("filler", fillerScript)
	filler.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "HOLD", Value: fillerHold}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wrote, err := waitLog(ctx, w, ns, claimant.Name, "[CLAIM-", 10*time.Minute)
	if err != nil {
		// The claimant reports only once the filler filled the node
		// share and freed it again: say what became of the filler.
		_, ferr := waitLog(ctx, w, ns, filler.Name, "[FILLED]", time.Second)
		var conds []string
		if n, nerr := cs.CoreV1().Nodes().Get(ctx, w.node.Name(), metav1.GetOptions{}); nerr == nil {
			for _, c := range n.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Message))
			}
		}
		t.Fatalf("%v\nthe filler: %v\nthe node: %s", err, ferr, strings.Join(conds, "; "))
	}
	full, _ := waitLog(ctx, w, ns, claimant.Name, "emptyDir full", time.Minute)
	t.Logf("claimant: %s", full)
	t.Logf("claimant: %s", wrote)
	// The filler reports only once it freed its emptyDir; a node
	// without the share may have evicted it by then (disk pressure).
	if filled, err := waitLog(ctx, w, ns, filler.Name, "[FILLED]", 3*time.Minute); err == nil {
		t.Logf("filler: %s", filled)
	} else {
		t.Logf("filler: no report (%v)", err)
	}
	if !strings.HasPrefix(wrote, "[CLAIM-WRITTEN]") {
		t.Errorf("with the node's emptyDirs full, a write within the %s claim failed: %s", shareClaimSize, wrote)
	}
	releaseFiller(t, w, ns, filler.Name)
}

// sharePod is a busybox pod running script with an emptyDir at /scratch.
func sharePod(name, script string) *corev1.Pod {
	return busyboxPod(name, script, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, "/scratch")
}

// busyboxPod is a busybox pod running script, with vol mounted at path.
func busyboxPod(name, script string, vol corev1.Volume, path string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: vol.Name, MountPath: path}},
			}},
			Volumes: []corev1.Volume{vol},
		},
	}
}

// releaseFiller deletes the filling pod and waits until the node reports
// no disk pressure, so that the tests after this one find a schedulable
// node with its room back.
func releaseFiller(t *testing.T, w *world, ns, pod string) {
	t.Helper()
	ctx := context.Background()
	cs := w.cp.Client
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await.For(t, ctx, 3*time.Minute, "pod "+pod+" gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("still there (%v)", err)
	})
	// Once the claim is written the disk is full for real, and the
	// kubelet may report DiskPressure; it keeps the condition for its
	// evictionPressureTransitionPeriod (5 minutes by default) after the
	// filler's room is free again.
	await.For(t, ctx, 7*time.Minute, "node "+w.node.Name()+" without disk pressure", func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, w.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeDiskPressure && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("DiskPressure: %s", c.Message)
			}
		}
		return true, nil
	})
}
