package e2evm

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/node/kubernetes/volumehealth"
	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/nodevm"
)

// TestQuotaDamageReported breaks the project quotas of two filesystem
// volumes in use by a running pod, from a privileged pod with the node's
// volumes directory mounted (as an administrator on the node might): one
// quota is removed, the other raised behind Plinth's back. Quotas are
// enforced only on a real Plinth node, so this is where the health
// monitor's quota findings are seen end to end: each claim gets a Warning
// VolumeConditionAbnormal saying what happened, and the untouched claim
// none. The node checks every minute (the default interval).
func TestQuotaDamageReported(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "health")
	cs := w.cp.Client
	names := []string{"lost", "raised", "intact"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "user"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "echo RUNNING; exec sleep 1000000"},
			}},
		},
	}
	for _, n := range names {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, nodevm.Claim(n, corev1.PersistentVolumeFilesystem, "1Mi"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: n, MountPath: "/" + n})
		pod.Spec.Volumes = append(pod.Spec.Volumes, nodevm.ClaimVolume(n))
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitLog(ctx, w, ns, pod.Name, "RUNNING", 5*time.Minute); err != nil {
		t.Fatal(err)
	}

	for mode, n := range map[string]string{"clear": "lost", "raise": "raised"} {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		breaker := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "break-" + n},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{
					Name: "main", Image: images.PersistentVolumeRef, ImagePullPolicy: corev1.PullNever,
					Args:            []string{"-damage-quota", mode + ":/volumes/" + pvc.Spec.VolumeName},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
					VolumeMounts:    []corev1.VolumeMount{{Name: "volumes", MountPath: "/volumes"}},
				}},
				Volumes: []corev1.Volume{{Name: "volumes", VolumeSource: corev1.VolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: nodeDataDir + "/volumes"},
				}}},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, breaker, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		line, err := waitLog(ctx, w, ns, breaker.Name, "[DAMAGE-", 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, "[DAMAGE-DONE]") {
			t.Fatalf("breaking the quota of claim %s: %s", n, line)
		}
	}
	damaged := time.Now()

	for n, want := range map[string]string{"lost": "no project quota", "raised": "changed outside Plinth"} {
		var msg string
		await.For(t, ctx, 3*time.Minute, volumehealth.ReasonAbnormal+" on claim "+n, func() (bool, error) {
			msg = warning(ctx, w, ns, n, volumehealth.ReasonAbnormal)
			return msg != "", nil
		})
		t.Logf("claim %s: %s %.0fs after the damage: %s", n, volumehealth.ReasonAbnormal, time.Since(damaged).Seconds(), msg)
		if !strings.Contains(msg, want) {
			t.Errorf("claim %s: the Event says %q, want it to mention %q", n, msg, want)
		}
	}
	if msg := warning(ctx, w, ns, "intact", volumehealth.ReasonAbnormal); msg != "" {
		t.Errorf("the untouched claim got %s: %s", volumehealth.ReasonAbnormal, msg)
	}
}

// warning returns the message of claim's Warning Event with reason, or "".
func warning(ctx context.Context, w *world, ns, claim, reason string) string {
	if msgs := warnings(ctx, w, ns, claim, reason); len(msgs) > 0 {
		return msgs[0]
	}
	return ""
}

// warnings returns the messages of claim's Warning Events with reason.
func warnings(ctx context.Context, w *world, ns, claim, reason string) []string {
	evs, err := w.cp.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=" + claim +
			",type=" + corev1.EventTypeWarning + ",reason=" + reason,
	})
	if err != nil {
		return nil
	}
	msgs := make([]string, 0, len(evs.Items))
	for _, e := range evs.Items {
		msgs = append(msgs, e.Message)
	}
	return msgs
}

// TestQuotaEscapeRepaired plays a pod, in the host's user namespace as
// pods are by default, that moves a directory of its 4 MiB volume out of
// the volume's project quota and writes 8 MiB into it, which the kernel
// allows. The node must put the files back, its quota watch as they are
// written (which may cut the write short) or its audit (every 20 s on
// this node, see setUp): the claim
// gets a Warning VolumeQuotaRestored saying how much, and inside the pod
// the volume then shows itself full and the next write fails. The pod
// has CAP_SYS_ADMIN: the node's runc wrapper refuses the move to any pod
// without it (TestPodCannotMoveFilesIntoNeighbourProject), and the audit
// is for clusters where Plinth does not configure the runtime.
func TestQuotaEscapeRepaired(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "escape")
	cs := w.cp.Client
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, nodevm.Claim("data", corev1.PersistentVolumeFilesystem, "4Mi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "escape"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.PersistentVolumeRef, ImagePullPolicy: corev1.PullNever,
				Args:         []string{"-escape-quota", "/data"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				SecurityContext: &corev1.SecurityContext{
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}},
				},
			}},
			Volumes: []corev1.Volume{nodevm.ClaimVolume("data")},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	line, err := waitLog(ctx, w, ns, pod.Name, "[ESCAPE", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// [ESCAPE-CUT]: the node's quota watch put the files back while the
	// pod was still writing (it reads every volume's usage each second),
	// and the rest of the write failed over the size: repaired sooner.
	if !strings.HasPrefix(line, "[ESCAPED]") && !strings.HasPrefix(line, "[ESCAPE-CUT]") {
		t.Fatalf("the pod could not move files out of its volume's quota, so there is nothing to repair: %s", line)
	}
	escaped := time.Now()
	t.Logf("pod: %s", line)

	var msg string
	await.For(t, ctx, 3*time.Minute, volumehealth.ReasonQuotaRestored+" on the claim", func() (bool, error) {
		msg = warning(ctx, w, ns, "data", volumehealth.ReasonQuotaRestored)
		return msg != "", nil
	})
	t.Logf("claim: %s %.0fs after the escape: %s", volumehealth.ReasonQuotaRestored, time.Since(escaped).Seconds(), msg)
	// The node's quota watch puts the files back as they are written
	// (the audit's walk finds them otherwise): the Event says how much
	// they held when it did, what the quota charges for them. So it has
	// no upper bound in the 8 MiB written: XFS counts the blocks it
	// reserves past the end of a growing file (speculative preallocation,
	// trimmed later), and one CI run's Event said 32640Ki. Nor a lower
	// one: the watch may put the file back mid-write (one run: 4Mi held,
	// the rest counted against the volume), or put the directory back
	// before the pod wrote into it ("the 0 they hold"), when the write
	// fails at the volume's size and nothing escapes at all.
	// Which entry is put back first is a race: the watch's check of
	// the directory's creation (if the pod had moved it out by then),
	// or its check of the file written in it, or the walk either
	// check asks for. Either is named by its path in the volume.
	if !strings.Contains(msg, `(the first: "moved-out")`) && !strings.Contains(msg, `(the first: "moved-out/big")`) {
		t.Errorf("the Event says %q, want it to name the first entry put back by its path in the volume, \"moved-out\" or \"moved-out/big\"", msg)
	}
	var held int64 = -1
	if h := regexp.MustCompile(`so the (\S+) they hold did not count`).FindStringSubmatch(msg); h != nil {
		if q, err := resource.ParseQuantity(h[1]); err == nil {
			held = q.Value()
		}
	}
	if held < 0 {
		t.Errorf("the Event says %q, want it to say how much the files held", msg)
	}
	line, err = waitLog(ctx, w, ns, pod.Name, markEscapeEnded, 2*time.Minute)
	if err != nil {
		t.Fatalf("after the repair, the pod's writes past its size did not start failing: %v", err)
	}
	t.Logf("pod: %s", line)
	m := regexp.MustCompile(`shows (\d+) of (\d+) bytes used`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the pod's last line has no usage: %s", line)
	}
	if used, _ := strconv.ParseInt(m[1], 10, 64); used < 4<<20 {
		t.Errorf("after the repair the pod sees %d bytes used in its 4 MiB volume, want it full", used)
	}
	// An operator's alert sees it in plinth-node's counters.
	s, err := metricstest.Get("http://" + w.node.MetricsAddress() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	entries, bytes := s.Families.Value("plinth_quota_audit_restored_entries_total"), s.Families.Value("plinth_quota_audit_restored_bytes_total")
	t.Logf("plinth-node: plinth_quota_audit_restored_entries_total %v, plinth_quota_audit_restored_bytes_total %v", entries, bytes)
	if entries < 1 || bytes < float64(held) {
		t.Errorf("plinth-node counted %v entries and %v bytes put back, want at least the directory and the %d bytes of the Event", entries, bytes, held)
	}
}

// markEscapeEnded is what the escape pod prints once a write over its
// volume's size fails again (test/e2e/persistentvolume).
const markEscapeEnded = "[ESCAPE-ENDED]"
