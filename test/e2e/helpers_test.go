package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/test/e2e/await"
	"source.plinth.dev/test/images"
)

// waitPodRunning waits until the pod runs; on timeout the error carries the
// pod's events, which name the real cause (a failed volume map, an image
// that is not there).
func waitPodRunning(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.Status.Phase == corev1.PodRunning {
			return nil
		}
		if err == nil && (pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded) {
			return fmt.Errorf("pod %s/%s ended: %s %s", ns, name, pod.Status.Phase, await.Events(ctx, cs, ns, name))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s not running: %w; events: %s", ns, name, ctx.Err(), await.Events(ctx, cs, ns, name))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deletePod deletes a pod and waits until kubelet has finished with it.
func deletePod(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grace := int64(1)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting pod %s/%s: %v", ns, name, err)
		return
	}
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("pod %s/%s still exists after deletion: %v", ns, name, ctx.Err())
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// busyboxPod is a pod running sh -c script in the locally built image.
func busyboxPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           images.BusyboxRef,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }
