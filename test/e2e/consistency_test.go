package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// consistencySize is the claims' size: room for 131072 records, more than
// a writer acknowledges in the time a snapshot is taken, so that it is
// still writing when the snapshot is made.
const consistencySize = "64Mi"

// TestSnapshotHoldsAPrefixOfAWriter is the consistency the README states,
// seen from the pods: a pod appends numbered records to its claim, each
// acknowledged (O_DSYNC) before the next, and the user snapshots the claim
// while it writes. A claim restored from the snapshot holds a gap-free
// prefix of the records: every record acknowledged before the snapshot
// was requested, and no record without all those before it. A block
// volume's snapshot is one copy of its image, so this holds for the whole
// volume; a filesystem volume's files are copied one by one, so it holds
// for each file (here, the one file the records go to).
func TestSnapshotHoldsAPrefixOfAWriter(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem} {
		t.Run(string(mode), func(t *testing.T) {
			snapshotWhileWriting(t, c, dyn, mode)
		})
	}
}

// snapshotWhileWriting runs the test for one volume mode.
func snapshotWhileWriting(t *testing.T, c *launch.Cluster, dyn dynamic.Interface, mode corev1.PersistentVolumeMode) {
	ctx := t.Context()
	name := "e2e-consistency-" + map[corev1.PersistentVolumeMode]string{corev1.PersistentVolumeBlock: "block", corev1.PersistentVolumeFilesystem: "fs"}[mode]
	pvc := createClaim(t, c, name, mode, consistencySize)
	writer := recordsPod(name+"-writer", name, mode, "-append-records")
	runPod(t, c, writer, pvc)

	// The writer is under way; what it acknowledged before the snapshot
	// is requested must be in the snapshot.
	var before int
	await.For(t, ctx, time.Minute, "writer "+writer.Name+" to acknowledge 200 records", func() (bool, error) {
		before = lastAcked(ctx, c, writer.Name)
		return before >= 200, fmt.Errorf("%d acknowledged", before)
	})
	snapshotOf(t, dyn, name, name)
	start := time.Now()
	waitSnapshotReady(t, ctx, dyn, name)
	after := lastAcked(ctx, c, writer.Name)
	t.Logf("snapshot %s ready %.1fs after it was requested; the writer had acknowledged %d records before, %d after", name, time.Since(start).Seconds(), before, after)

	restored := claimFrom(t, c, name+"-restored", mode, consistencySize, snapshotSource(name))
	checker := recordsPod(name+"-checker", restored.Name, mode, "-check-records")
	runPod(t, c, checker, restored)
	log := podLogs(t, c, checker.Name, "[RECORDS-")
	m := regexp.MustCompile(`(?m)^\[RECORDS-PREFIX\] (\d+)$`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the restored claim does not hold a gap-free prefix of the records: %s", log)
	}
	n, _ := strconv.Atoi(m[1])
	t.Logf("restored claim %s: records 0..%d", restored.Name, n-1)
	if n < before {
		t.Errorf("the restored claim holds %d records, want at least the %d acknowledged before the snapshot was requested", n, before)
	}
	// A snapshot taken after the writer stopped proves nothing about
	// writes in flight.
	if n >= after {
		t.Errorf("the restored claim holds %d records, the writer had acknowledged %d once the snapshot was ready: it was not writing during the snapshot", n, after)
	}
}

// recordsPod runs the test image's records mode mode on claim: at
// /dev/xrec for a block claim, on /data/records for a filesystem one.
func recordsPod(name, claim string, mode corev1.PersistentVolumeMode, recordsMode string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.PersistentVolumeRef, ImagePullPolicy: corev1.PullNever,
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	ctr := &pod.Spec.Containers[0]
	if mode == corev1.PersistentVolumeBlock {
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/xrec"}}
		ctr.Args = []string{recordsMode, "/dev/xrec"}
	} else {
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		ctr.Args = []string{recordsMode, "/data/records"}
	}
	return pod
}

// lastAcked is the count of the writer's last [RECORDS-ACKED] line, or 0.
func lastAcked(ctx context.Context, c *launch.Cluster, pod string) int {
	b, err := c.Client.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return 0
	}
	all := regexp.MustCompile(`(?m)^\[RECORDS-ACKED\] (\d+)$`).FindAllSubmatch(b, -1)
	if len(all) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(string(all[len(all)-1][1]))
	return n
}
