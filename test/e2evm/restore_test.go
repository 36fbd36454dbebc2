package e2evm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/snapshotapi"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/nodevm"
)

// restoreSourceSize and restoreSize are the claim a snapshot is taken of
// and the larger claim restored from it; restoreWritten is what the
// source's pod writes, and restoreMore what the restored pod adds: more
// than the source could hold, less than the restore may.
const (
	restoreSourceSize = "32Mi"
	restoreSize       = "64Mi"
	restoreSizeKiB    = 64 << 10
	restoreWritten    = 16 // MiB
	restoreMore       = 40 // MiB
	restoreOver       = 16 // MiB, past restoreSize with the rest
)

// restoreWriterScript writes the source claim's data and says its
// checksum.
const restoreWriterScript = `dd if=/dev/urandom of=/claim/data bs=1M count=$WRITTEN conv=fsync 2>/dev/null
echo "[WRITTEN] $(md5sum < /claim/data | cut -d' ' -f1)"
exec sleep 1000000`

// restoreReaderScript says what the restored claim holds and how big the
// pod sees it, then writes MORE MiB, which fit only if the restore was
// grown past its source's size, then OVER MiB more, which must not fit.
const restoreReaderScript = `echo "[READ] $(md5sum < /claim/data | cut -d' ' -f1)"
echo "[SIZE] $(df -k /claim | tail -1 | awk '{print $2}')"
if dd if=/dev/zero of=/claim/more bs=1M count=$MORE conv=fsync 2>/dev/null; then echo "[MORE] written"; else echo "[MORE] failed"; fi
if r=$(dd if=/dev/zero of=/claim/over bs=1M count=$OVER conv=fsync 2>&1); then echo "[OVER] written"; else echo "[OVER] refused: $r" | tr '\n' ' '; echo; fi
exec sleep 1000000`

// TestRestoreIntoLargerClaimHasItsRoom takes a snapshot of a filesystem
// claim on the VM node, where quotas are enforced, and restores it into a
// claim twice its size. Inside the restored claim's pod: the data is the
// source's, statfs shows the restored claim's size (not the source's),
// a write that fits only in the larger size succeeds, and one past it
// fails. A restore whose quota stayed the source's fails the second
// check; one left without a quota fails the last.
func TestRestoreIntoLargerClaimHasItsRoom(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "restore")
	cs := w.cp.Client
	snaps, err := snapshotapi.NewClient(w.cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, nodevm.Claim("source", corev1.PersistentVolumeFilesystem, restoreSourceSize), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writer := claimPod("writer", "source", restoreWriterScript, map[string]int{"WRITTEN": restoreWritten})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, writer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	written, err := waitLog(ctx, w, ns, writer.Name, "[WRITTEN]", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	snap := &crdv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap"},
		Spec:       crdv1.VolumeSnapshotSpec{Source: crdv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr("source")}},
	}
	if _, err := snaps.SnapshotV1().VolumeSnapshots(ns).Create(ctx, snap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	await.For(t, ctx, 3*time.Minute, "VolumeSnapshot snap ready to use", func() (bool, error) {
		got, err := snaps.SnapshotV1().VolumeSnapshots(ns).Get(ctx, snap.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if st := got.Status; st != nil && st.ReadyToUse != nil && *st.ReadyToUse {
			return true, nil
		}
		return false, fmt.Errorf("status %+v", got.Status)
	})
	restored := nodevm.Claim("restored", corev1.PersistentVolumeFilesystem, restoreSize)
	restored.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr(crdv1.GroupName), Kind: "VolumeSnapshot", Name: snap.Name}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, restored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := claimPod("reader", "restored", restoreReaderScript, map[string]int{"MORE": restoreMore, "OVER": restoreOver})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	over, err := waitLog(ctx, w, ns, reader.Name, "[OVER]", 5*time.Minute)
	if err != nil {
		t.Fatalf("%v\nclaim events: %s", err, await.Events(ctx, cs, ns, "restored"))
	}
	read, _ := waitLog(ctx, w, ns, reader.Name, "[READ]", time.Second)
	size, _ := waitLog(ctx, w, ns, reader.Name, "[SIZE]", time.Second)
	more, _ := waitLog(ctx, w, ns, reader.Name, "[MORE]", time.Second)
	t.Logf("writer: %s; reader: %s, %s KiB, %s, %s", written, read, size, more, over)
	if want := strings.TrimPrefix(written, "[WRITTEN] "); strings.TrimPrefix(read, "[READ] ") != want {
		t.Errorf("the restored claim's data has checksum %q, the source's had %q", read, want)
	}
	if want := fmt.Sprintf("[SIZE] %d", restoreSizeKiB); size != want {
		t.Errorf("statfs of the restored %s claim, in its pod: %q, want %q (KiB)", restoreSize, size, want)
	}
	if more != "[MORE] written" {
		t.Errorf("writing %d MiB more into the restored %s claim holding %d MiB: %s; its room stayed the %s source's?", restoreMore, restoreSize, restoreWritten, more, restoreSourceSize)
	}
	if !strings.HasPrefix(over, "[OVER] refused") {
		t.Errorf("writing %d MiB past the restored claim's %s: %s", restoreOver, restoreSize, over)
	}
}

// claimPod is a busybox pod running script with claim mounted at /claim
// and env's values in its environment.
func claimPod(name, claim, script string, env map[string]int) *corev1.Pod {
	pod := busyboxPod(name, script, nodevm.ClaimVolume(claim), "/claim")
	for k, v := range env {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: k, Value: fmt.Sprint(v)})
	}
	return pod
}
