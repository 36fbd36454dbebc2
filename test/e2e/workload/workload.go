// Package workload is the suite's side of the in-pod test workload
// (test/e2e/persistentvolume): its four claims, its pod, its arguments,
// and reading its verdicts from the pod's log. The host e2e suite
// (test/e2e) and the VM node's (test/e2evm) run the same workload through
// it, each adding the node-side checks it can make.
package workload

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// Runtime is a container runtime the workload runs under.
type Runtime struct {
	Name string
	// Class is the pod's runtimeClassName; empty means the node's default
	// runtime (runc).
	Class string
	// SkipBlock, when set, is why this runtime gets no block claims: the
	// workload is told to skip them and prints the reason.
	SkipBlock string
	// SkipMountFlags, when set, is why the workload does not check the
	// filesystem claim's nosuid/nodev from inside: a runtime whose sandbox
	// shows mount flags of its own. The suite checks the node's mount.
	SkipMountFlags string
}

// RuntimeOf is the workload's setting for a runtime of a cluster or node:
// a runtime that cannot pass block devices into the pod gets SkipBlock,
// with its reason; gVisor gets SkipMountFlags.
func RuntimeOf(r launch.Runtime) Runtime {
	rt := Runtime{Name: r.Name}
	if r.RuntimeClassName != nil {
		rt.Class = *r.RuntimeClassName
	}
	if !r.Block {
		rt.SkipBlock = r.NoBlockReason
	}
	if rt.Class == launch.GVisorRuntimeClass {
		// Measured: statfs in a gVisor pod shows flags 0x0 for the
		// claim, whose bind mount on the node is nosuid,nodev (test/e2e
		// checks that mount on the host; the runc run checks the flags
		// from inside).
		rt.SkipMountFlags = "gVisor's sandbox kernel shows mount flags of its own (0x0), not the node's nosuid,nodev mount"
	}
	return rt
}

// The workload's claims: each request, and what the suite grows them to.
const (
	Size     = "1Mi"
	ResizeTo = "4Mi"
	// RecoverTo is the lowered request after an infeasible one. The API
	// server refuses a request that is not above the claim's capacity, so
	// it is one MiB above ResizeTo, which the node must then grow to.
	RecoverTo = "5Mi"
	// FSGroup and User: the pod runs as a non-root user whose only way to
	// the volume is the fsGroup.
	FSGroup = 2000
	User    = 1000
)

// Claim is one of the workload's claims.
type Claim struct {
	Suffix   string
	Mode     corev1.PersistentVolumeMode
	ReadOnly bool
	Path     string // mount point or device path in the pod
	Flag     string // the workload's flag for Path
}

// Claims are the workload's four claims.
var Claims = []Claim{
	{"fs", corev1.PersistentVolumeFilesystem, false, "/mnt/fs", "-fs"},
	{"fs-ro", corev1.PersistentVolumeFilesystem, true, "/mnt/fs-ro", "-fs-ro"},
	{"block", corev1.PersistentVolumeBlock, false, "/dev/xvda", "-block"},
	{"block-ro", corev1.PersistentVolumeBlock, true, "/dev/xvdb", "-block-ro"},
}

// Spec is a workload pod and the claims it uses.
type Spec struct {
	Pod    *corev1.Pod
	Claims []Claim
	// PVCs are the claim objects to create, in the order of Claims.
	PVCs []*corev1.PersistentVolumeClaim
}

// NewSpec builds the workload's pod called name and its claims (named
// <name>-<suffix>) for runtime rt, telling the workload whether the node
// enforces quotas. Never assumed: the caller must know.
func NewSpec(name string, rt Runtime, quotaEnforced bool) Spec {
	args := []string{"-size=" + Size, "-resize-to=" + ResizeTo, "-resize-timeout=90s", fmt.Sprintf("-fsgroup=%d", FSGroup)}
	if quotaEnforced {
		args = append(args, "-quota=enforced")
	} else {
		args = append(args, "-quota=not-enforced")
	}
	s := Spec{Pod: pod(name, rt)}
	for _, wc := range Claims {
		if wc.Mode == corev1.PersistentVolumeBlock && rt.SkipBlock != "" {
			continue
		}
		s.Claims = append(s.Claims, wc)
		s.PVCs = append(s.PVCs, claim(name+"-"+wc.Suffix, wc.Mode))
		addClaim(s.Pod, name+"-"+wc.Suffix, wc)
		args = append(args, wc.Flag+"="+wc.Path)
	}
	if rt.SkipBlock != "" {
		args = append(args, "-skip-block="+rt.SkipBlock)
	}
	if rt.SkipMountFlags != "" {
		args = append(args, "-skip-mount-flags="+rt.SkipMountFlags)
	}
	s.Pod.Spec.Containers[0].Args = args
	return s
}

func ptr[T any](v T) *T { return &v }

// pod is the workload's pod without claims: a non-root user in the
// fsGroup, under the runtime's class.
func pod(name string, rt Runtime) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:    ptr(int64(User)),
				RunAsGroup:   ptr(int64(User)),
				RunAsNonRoot: ptr(true),
				FSGroup:      ptr(int64(FSGroup)),
			},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           images.PersistentVolumeRef,
				ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	if rt.Class != "" {
		p.Spec.RuntimeClassName = ptr(rt.Class)
	}
	return p
}

func claim(name string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &mode,
			StorageClassName: ptr(names.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(Size)}},
		},
	}
}

// addClaim gives the pod the claim at wc.Path, read-only through the
// claim's readOnly flag when wc says so.
func addClaim(p *corev1.Pod, claim string, wc Claim) {
	vol := wc.Suffix
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: wc.ReadOnly},
	}})
	ctr := &p.Spec.Containers[0]
	if wc.Mode == corev1.PersistentVolumeBlock {
		ctr.VolumeDevices = append(ctr.VolumeDevices, corev1.VolumeDevice{Name: vol, DevicePath: wc.Path})
	} else {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: wc.Path})
	}
}

// WaitMarker waits until the pod's log has the pass line and returns the
// log; it fails with the log when the fail line comes instead or neither
// comes in time.
func WaitMarker(ctx context.Context, client kubernetes.Interface, ns, pod, pass, fail string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	var logs []byte
	var err error
	for time.Now().Before(deadline) {
		logs, err = client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		switch {
		case err != nil:
		case bytes.Contains(logs, []byte(fail)):
			return logs, fmt.Errorf("pod %s reports %s; its log:\n%s", pod, fail, logs)
		case bytes.Contains(logs, []byte(pass)):
			return logs, nil
		}
		select {
		case <-ctx.Done():
			return logs, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return logs, fmt.Errorf("waiting %v for %s in the log of pod %s: gave up (last error: %v); log:\n%s", timeout, pass, pod, err, logs)
}

// Checks reads the workload's result lines: how many passed, the skipped
// ones (each says why) and the failed ones (which the verdict line would
// have caught already).
func Checks(logs []byte) (passed int, skipped, failed []string) {
	for _, line := range strings.Split(string(logs), "\n") {
		switch {
		case strings.HasPrefix(line, "[PASS]"):
			passed++
		case strings.HasPrefix(line, "[SKIP]"):
			skipped = append(skipped, line)
		case strings.HasPrefix(line, "[FAIL]"):
			failed = append(failed, line)
		}
	}
	return passed, skipped, failed
}
