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
