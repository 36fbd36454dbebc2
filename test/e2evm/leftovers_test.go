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

// Where the node image keeps its data partition and the kubelet's root
// (plinth-node's init: the kubelet's root lives on the data partition).
const (
	nodeDataDir    = nodevm.DataDir
	nodeKubeletDir = nodevm.DataDir + "/kubelet"
)

// nodeLeftovers runs the workload image's leftovers mode in a privileged
// pod on the VM node (hostPID, the data partition mounted at its own
// path) and returns the line it printed: "[NODE-CLEAN] ..." when nothing
// on the node names volumes or keys within wait, "[NODE-LEFT] ..." with
// what does. The pod is deleted before it returns, so its mount of the
// data partition holds nothing the teardown under test needs gone.
func nodeLeftovers(t *testing.T, w *world, ns, name string, wait time.Duration, volumes, keys []string) string {
	t.Helper()
	ctx := context.Background()
	cs := w.cp.Client
	arg := strings.Join(append([]string{nodeDataDir, nodeKubeletDir, wait.String(), strings.Join(volumes, "+")}, keys...), ",")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			HostPID:                       true,
			AutomountServiceAccountToken:  ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.PersistentVolumeRef, ImagePullPolicy: corev1.PullNever,
				Args:            []string{"-node-leftovers", arg},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: nodeDataDir}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: nodeDataDir, Type: ptr(corev1.HostPathDirectory)},
			}}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	line, err := waitLog(ctx, w, ns, name, "[NODE-", wait+5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await.For(t, ctx, 2*time.Minute, "pod "+name+" gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("still there (%v)", err)
	})
	return line
}

// leftoverKinds are the kinds of trace the leftovers mode reports, as its
// lines begin, that a running workload pod with its four claims has on
// the node: the check before teardown requires each, so a leftovers mode
// that stopped seeing one of them fails there rather than passing the
// check after teardown by seeing nothing.
var leftoverKinds = []string{"file ", "project ID claim ", loopDeviceKind, "mount ", "kubelet file "}

// loopDeviceKind is the kind of trace only block claims leave.
const loopDeviceKind = "loop device "

// checkSeesEverything requires the report of a node in use (line) to name
// every kind of trace; noBlock: the workload had no block claims, so no
// loop device.
func checkSeesEverything(t *testing.T, line string, noBlock bool) {
	t.Helper()
	if !strings.HasPrefix(line, "[NODE-LEFT] ") {
		t.Fatalf("with the workload running, the leftovers check found nothing: %s", line)
	}
	for _, k := range leftoverKinds {
		if noBlock && k == loopDeviceKind {
			continue
		}
		if !strings.Contains(line, "] "+k) && !strings.Contains(line, "; "+k) {
			t.Errorf("with the workload running, the leftovers check saw no %q: %s", strings.TrimSpace(k), line)
		}
	}
}
