package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// RunPod runs pod (RestartPolicy Never) until it has Succeeded or Failed,
// at most timeout, and returns its first container's log and when this
// host saw it end. It then deletes the pod and waits until it is gone, so
// that its volumes are unpublished before anything else runs. A pod that
// failed is an error carrying the end of its log.
func RunPod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) (log []byte, ended time.Time, err error) {
	ns, name := pod.Namespace, pod.Name
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, time.Time{}, fmt.Errorf("creating pod %s: %w", name, err)
	}
	phase, err := waitEnded(ctx, c, ns, name, timeout)
	ended = time.Now()
	if err == nil {
		log, err = c.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: pod.Spec.Containers[0].Name}).DoRaw(ctx)
		if err != nil {
			err = fmt.Errorf("reading the log of pod %s: %w", name, err)
		} else if phase != corev1.PodSucceeded {
			err = fmt.Errorf("pod %s %s:\n%s", name, phase, logTail(log))
		}
	}
	return log, ended, errors.Join(err, deletePod(ctx, c, ns, name))
}

// waitEnded waits until pod ns/name has Succeeded or Failed.
func waitEnded(ctx context.Context, c kubernetes.Interface, ns, name string, timeout time.Duration) (corev1.PodPhase, error) {
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		return phase, fmt.Errorf("waiting for pod %s to end (phase %q): %w", name, phase, err)
	}
	return phase, nil
}

// deletePod deletes pod ns/name and waits until it is gone.
func deletePod(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	if err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for pod %s to be gone: %w", name, err)
	}
	return nil
}

// logTail is the end of a log, for an error message.
func logTail(log []byte) []byte {
	if len(log) > 2000 {
		return log[len(log)-2000:]
	}
	return log
}
