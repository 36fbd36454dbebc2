package e2evm

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/images"
)

// nodeCtr runs the node's own ctr on its containerd, in the CRI
// namespace, from a privileged pod with the node's root at /host.
const nodeCtr = "chroot /host /usr/bin/ctr --address /run/containerd/containerd.sock --namespace k8s.io"

// TestShippedImageKeptPresent deletes the sandbox image from the node's
// containerd, as the kubelet's image reclaim under disk pressure does, and
// requires a new pod to start within a bounded time, with the image listed
// again: a node's images come only from its image archives, so without
// plinth-node importing them again no pod could start until a reboot
// ("failed to pull image plinth.local/pause:1").
//
// The kubelet deletes through the CRI (RemoveImage), which deletes the
// image's names from containerd's image store, and the CRI plugin follows
// that store's events; the pod here deletes the name with ctr, to the same
// effect. After restoreAfter it imports the image itself if it is still
// missing, so that a failure here leaves the shared node usable.
func TestShippedImageKeptPresent(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "images")
	cs := w.cp.Client
	const restoreAfter = 4 * time.Minute
	remove := strings.Join([]string{
		nodeCtr + " images rm " + images.PauseRef + " && echo '[RMI-DONE]' || echo '[RMI-FAILED]'",
		"sleep " + strconv.Itoa(int(restoreAfter.Seconds())),
		nodeCtr + " images ls -q | grep -qx " + images.PauseRef + " || { " + nodeCtr + " images import /usr/share/plinth/images/pause.tar >/dev/null; echo '[RESTORED-BY-TEST]'; }",
		"exec sleep 1000000",
	}, "\n")
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, hostRootPod("rmi", remove), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	line, err := waitLog(ctx, w, ns, "rmi", "[RMI-", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if line != "[RMI-DONE]" {
		t.Fatalf("could not delete %s on the node: %s", images.PauseRef, line)
	}
	removed := time.Now()
	t.Logf("deleted %s from the node's containerd", images.PauseRef)

	// The new pod needs the sandbox image to start at all; once it runs,
	// it says whether containerd lists the image.
	list := "echo \"[LISTED] $(" + nodeCtr + " images ls -q | grep -cx " + images.PauseRef + ")\""
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, hostRootPod("after", list+"\nexec sleep 1000000"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	line, err = waitLog(ctx, w, ns, "after", "[LISTED]", 2*time.Minute)
	if err != nil {
		t.Fatalf("no pod starts after the sandbox image was deleted: %v", err)
	}
	t.Logf("a new pod ran %.0fs after the deletion: %s", time.Since(removed).Seconds(), line)
	if line != "[LISTED] 1" {
		t.Errorf("containerd lists %s %s times, want once", images.PauseRef, strings.TrimPrefix(line, "[LISTED] "))
	}
}

// TestFirstBootSurvivesPowerCut: the node's first boot ended with a power
// cut (world.cutFirstBoot) within the kernel's writeback delay of its
// image imports; a pod must start on the node after it, with the
// sandbox's and the pod's binaries whole. Before containerd's root was
// synced after each import, every sandbox died at once after such a cut
// (runc: "lstat /proc/<pause>/ns/ipc: no such file"), the unpacked pause
// and busybox binaries being 0 bytes.
func TestFirstBootSurvivesPowerCut(t *testing.T) {
	w := vmWorld(t)
	// The writeback delay is dirty_expire_centisecs, 30 s by default: a
	// later cut would find the files written out anyway, and prove
	// nothing.
	if w.firstCut > 20*time.Second {
		t.Fatalf("the first boot's power was cut %s after it was Ready; it must be within the writeback delay", w.firstCut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := newNamespace(t, w, "firstcut")
	script := "echo \"[SIZE] $(wc -c < /bin/busybox)\"\nexec sleep 1000000"
	if _, err := w.cp.Client.CoreV1().Pods(ns).Create(ctx, hostRootPod("after-cut", script), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	line, err := waitLog(ctx, w, ns, "after-cut", "[SIZE]", 3*time.Minute)
	if err != nil {
		t.Fatalf("no pod starts after the first boot's power cut (%s after Ready): %v", w.firstCut, err)
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(line, "[SIZE] ")); err != nil || n == 0 {
		t.Errorf("after the cut the pod's busybox is %q bytes, want the whole binary", strings.TrimPrefix(line, "[SIZE] "))
	}
}

// hostRootPod is a privileged busybox pod with the node's root at /host
// that runs script.
func hostRootPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "root", MountPath: "/host"}},
			}},
			Volumes: []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr(corev1.HostPathDirectory)},
			}}},
		},
	}
}
