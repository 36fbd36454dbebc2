package e2evm

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/volumehealth"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/nodevm"
)

// TestQuietMoveToldToNeighbour plays a pod that takes a neighbour's room
// without a write the node could follow: it writes a 4 MiB file, closes
// it, and only then moves it into the neighbour claim's project
// (FS_IOC_FSSETXATTR, which raises no event), from its own volume and
// then from its emptyDir (the kubelet's root is on the data partition
// here). The node's quota watch finds the move by the neighbour's usage
// and takes the file out of the neighbour's project; the neighbour,
// whose writes within its size could fail meanwhile, must hear of it: a
// Warning VolumeQuotaReclaimed on its claim, saying how much, and from
// which volume or from outside every volume. The pods have CAP_SYS_ADMIN:
// the node's runc wrapper refuses the move to any pod without it
// (TestPodCannotMoveFilesIntoNeighbourProject), and the watch is for
// clusters where Plinth does not configure the runtime.
func TestQuietMoveToldToNeighbour(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "quiet")
	cs := w.cp.Client
	sysAdmin := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
	start := func(name string, args []string, vol corev1.Volume) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{
					Name: "main", Image: images.PersistentVolumeRef, ImagePullPolicy: corev1.PullNever,
					Args:            args,
					VolumeMounts:    []corev1.VolumeMount{{Name: vol.Name, MountPath: "/data"}},
					SecurityContext: sysAdmin,
				}},
				Volumes: []corev1.Volume{vol},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"neighbour", "mover"} {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, nodevm.Claim(n, corev1.PersistentVolumeFilesystem, "8Mi"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start("neighbour", []string{"-show-project", "/data"}, nodevm.ClaimVolume("neighbour"))
	line, err := waitLog(ctx, w, ns, "neighbour", "[PROJECT]", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	project := strings.TrimPrefix(line, "[PROJECT] ")
	t.Logf("the neighbour's volume is project %s", project)

	for _, m := range []struct {
		name string
		vol  corev1.Volume
		want func() string // what the Event says the file came from
	}{
		{"from-volume", nodevm.ClaimVolume("mover"), func() string {
			pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "mover", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return "of volume " + pvc.Spec.VolumeName + " on node"
		}},
		{"from-emptydir", corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			func() string { return "from outside every volume" }},
	} {
		start(m.name, []string{"-move-quietly", project + ":/data"}, m.vol)
		line, err := waitLog(ctx, w, ns, m.name, "[MOVE", 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, "[MOVED-QUIETLY]") {
			t.Fatalf("%s could not move its file into the neighbour's project, so there is nothing to find: %s", m.name, line)
		}
		moved := time.Now()
		want := m.want()
		var msg string
		await.For(t, ctx, 2*time.Minute, volumehealth.ReasonQuotaReclaimed+" on the neighbour's claim saying "+want, func() (bool, error) {
			for _, s := range warnings(ctx, w, ns, "neighbour", volumehealth.ReasonQuotaReclaimed) {
				if strings.Contains(s, want) {
					msg = s
					return true, nil
				}
			}
			return false, nil
		})
		t.Logf("%s: the neighbour's claim got %s %.0fs after the move: %s", m.name, volumehealth.ReasonQuotaReclaimed, time.Since(moved).Seconds(), msg)
		// What the file held is what the quota charged for it:
		// its 4 MiB, or more while XFS kept blocks reserved past
		// its end.
		var held int64
		if h := regexp.MustCompile(`holding (\S+) `).FindStringSubmatch(msg); h != nil {
			if q, err := resource.ParseQuantity(h[1]); err == nil {
				held = q.Value()
			}
		}
		if held < 4<<20 || !strings.Contains(msg, `"quiet"`) && !strings.Contains(msg, `/quiet"`) {
			t.Errorf("%s: the Event says %q, want it to name the file \"quiet\" and the 4Mi it held", m.name, msg)
		}
	}
	if msgs := warnings(ctx, w, ns, "mover", volumehealth.ReasonQuotaReclaimed); len(msgs) > 0 {
		t.Errorf("the mover's claim was told its room was taken: %q", msgs)
	}
}
