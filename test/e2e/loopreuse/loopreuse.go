// Package loopreuse plays issue 34 against a cluster: a pod detaches the
// loop device of its own block claim (`losetup -d` needs no capability:
// the LOOP_CLR_FD ioctl checks none), and the next block claim published
// on the node must not become readable through the device node the first
// pod keeps. The kernel hands out the lowest free loop number, so a node
// that lets the detach free the number gives it to the next volume, and
// the first pod reads that volume.
//
// The host suite (test/e2e), the VM node's (test/e2evm) and deploy/'s
// (test/deploy) run the same scenario through Run, each adding what its
// node allows (a plinth-node restart only on the host). The pods are
// driven by their scripts and read through their logs: nothing here needs
// an exec into a pod or a view of the node.
package loopreuse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/e2e/await"
)

const (
	// Size is each claim's request: the issue's, and small, as the images
	// are sparse and only their first bytes are ever written.
	Size = "8Mi"
	// DevicePath is where each pod sees its claim (the path).
	DevicePath = "/dev/xblk"
	// Observe is how long pod A must keep not reading pod B's marker after
	// B wrote it: A reads every 0.3 s, so about 30 reads, and a leak shows
	// on the first read after B's device is bound.
	Observe = 10 * time.Second
	// repairTimeout bounds the wait, from B's write, for A's reads to
	// show A's own marker again: a node that repairs a detached device
	// may notice it late (a periodic check), but within a minute.
	repairTimeout = time.Minute
	// startTimeout bounds a pod's start with its new claim: provisioning
	// (the class is WaitForFirstConsumer), binding and publishing, under
	// TCG on two shared cores for the VM node.
	startTimeout = 3 * time.Minute
	// detachAnnotation is pod A's trigger. The kubelet rewrites a
	// downward API file when the pod changes, so patching the annotation
	// reaches the running script within a second or so, on any node.
	detachAnnotation = "plinth.test/loopreuse-detach"
)

// Options vary the scenario.
type Options struct {
	// Name prefixes the claims' and pods' names (<Name>-a, <Name>-b,
	// <Name>-lower): each variant needs its own, as a deleted claim's
	// volume may take a while to go.
	Name string
	// DetachDuringPublish makes A detach right after B's claim and pod
	// are created, while B's volume is being provisioned and published,
	// instead of before B exists.
	DetachDuringPublish bool
	// FreeLowerNumber first publishes a third pod's block claim (so below
	// A's loop number), and ends that pod after A's detach, before
	// AfterDetach: a loop number lower than A's is then free. A node that
	// re-binds A's detached image at the lowest free number, not at A's
	// own, leaves A's number to B.
	FreeLowerNumber bool
	// AfterDetach, when set, runs after A's detach and before B is
	// created (the host suite restarts plinth-node there).
	AfterDetach func(t testing.TB)
	// SysAdmin gives pod A CAP_SYS_ADMIN. On Plinth's own nodes runc runs
	// through plinth-node's wrapper (package runcguard), which refuses
	// the loop ioctls to containers without it; with it, A's detach goes
	// through, and the scenario tests the wall behind the wrapper:
	// plinth-node's hold on the device.
	SysAdmin bool
	// Node, when set, describes the node's loop devices for the log at
	// each step and in a failure (the host suite can look; a VM node
	// cannot be seen from the test).
	Node func() string
}

// Run plays the scenario in namespace ns with the busybox image (which
// must be on the node: the pods never pull):
//
//  1. Pod A writes its own marker to its claim's device, then, when
//     triggered, runs `losetup -d` on it and reads the device every 0.3 s.
//  2. Pod B, with a new claim, writes its marker to its device.
//  3. A's reads must never show B's marker, and must show A's own again
//     (the device still, or again, serves A's image).
//
// Every claim and pod is deleted at the end of t, and waited for.
func Run(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, image string, o Options) {
	t.Helper()
	if o.DetachDuringPublish && (o.AfterDetach != nil || o.FreeLowerNumber) {
		t.Fatal("loopreuse: AfterDetach and FreeLowerNumber happen before B exists; DetachDuringPublish detaches after")
	}
	s := &scenario{t: t, ctx: ctx, client: client, ns: ns, image: image, node: o.Node}
	own, mark := "A-OWN-"+token(t), "B-MARK-"+token(t)
	a, b, lower := o.Name+"-a", o.Name+"-b", o.Name+"-lower"
	if o.FreeLowerNumber {
		s.start(lower, "echo up; exec sleep 3600", nil, podOptions{})
		s.waitLog(lower, "up", startTimeout)
	}
	s.start(a, scriptA, map[string]string{"OWN": own}, podOptions{sysAdmin: o.SysAdmin})
	s.waitLog(a, "own written", startTimeout)
	s.logNode("pod " + a + " (" + s.volume(a) + ") wrote " + own)
	if !o.DetachDuringPublish {
		s.detach(a)
		if o.FreeLowerNumber {
			s.deletePod(lower)
			s.logNode("pod " + lower + " deleted")
		}
		if o.AfterDetach != nil {
			o.AfterDetach(t)
		}
	}
	created := time.Now()
	s.start(b, scriptB, map[string]string{"MARK": mark}, podOptions{})
	if o.DetachDuringPublish {
		s.detach(a)
	}
	logB := s.waitLog(b, "written", startTimeout)
	t.Logf("pod %s wrote %s %.1fs after it was created", b, mark, time.Since(created).Seconds())
	s.logNode("pod " + b + " (" + s.volume(b) + ") wrote " + mark)
	if before := lineWith(logB, "before: "); strings.Contains(before, own) {
		t.Errorf("pod %s's new device showed pod %s's marker before B wrote to it: %q", b, a, before)
	}
	s.watch(a, own, mark)
}

// scriptA is pod A: it writes its marker, waits for the trigger, detaches
// its own device and then reads the device's first bytes over and over
// (the NULs of an unwritten image stripped, so an empty read shows as
// nothing after "read:").
const scriptA = `printf %s "$OWN" | dd of=` + DevicePath + ` conv=fsync 2>/dev/null || exit 1
echo "own written"
until grep -q now /trigger/detach 2>/dev/null; do sleep 0.2; done
losetup -d ` + DevicePath + `; echo "detach rc=$?"
while true; do echo "read: $(dd if=` + DevicePath + ` bs=64 count=1 2>/dev/null | tr -d '\000')"; sleep 0.3; done`

// scriptB is pod B: it says what its new device held (nothing, as a new
// image is zeroed), writes its marker and stays.
const scriptB = `echo "before: $(dd if=` + DevicePath + ` bs=64 count=1 2>/dev/null | tr -d '\000')"
printf %s "$MARK" | dd of=` + DevicePath + ` conv=fsync 2>/dev/null || exit 1
echo written
exec sleep 3600`

type scenario struct {
	t      testing.TB
	ctx    context.Context
	client kubernetes.Interface
	ns     string
	image  string
	node   func() string
}

// podOptions vary a pod's security context.
type podOptions struct {
	// sysAdmin adds CAP_SYS_ADMIN to the container.
	sysAdmin bool
	// seccomp is the pod's seccomp profile type; empty asks for none
	// (Unconfined, unless the kubelet defaults otherwise).
	seccomp corev1.SeccompProfileType
	// probe, when set, is a shell script the container runs as its exec
	// readiness probe, every second.
	probe string
}

// start creates the block claim called name and a pod of the same name
// that runs script with env and the claim at DevicePath. The cleanups
// delete the pod first, then the claim.
func (s *scenario) start(name, script string, env map[string]string, o podOptions) {
	s.t.Helper()
	mode := corev1.PersistentVolumeBlock
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &mode,
			StorageClassName: new(names.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(Size)}},
		},
	}
	if _, err := s.client.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx, pvc, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating claim %s/%s: %v", s.ns, name, err)
	}
	s.t.Cleanup(func() { s.deleteClaim(name) })
	if _, err := s.client.CoreV1().Pods(s.ns).Create(s.ctx, pod(name, s.image, script, env, o), metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating pod %s/%s: %v", s.ns, name, err)
	}
	s.t.Cleanup(func() { s.deletePod(name) })
}

// pod runs script in the busybox image with the claim called name at
// DevicePath and the detach trigger (the pod's annotation) at
// /trigger/detach. It never restarts, so its log is the script's only run.
func pod(name, image, script string, env map[string]string, o podOptions) *corev1.Pod {
	var vars []corev1.EnvVar
	for k, v := range env {
		vars = append(vars, corev1.EnvVar{Name: k, Value: v})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullNever,
				Command:       []string{"sh", "-c", script},
				Env:           vars,
				VolumeDevices: []corev1.VolumeDevice{{Name: "data", DevicePath: DevicePath}},
				VolumeMounts:  []corev1.VolumeMount{{Name: "trigger", MountPath: "/trigger"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
				}},
				{Name: "trigger", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{Path: "detach", FieldRef: &corev1.ObjectFieldSelector{
						FieldPath: "metadata.annotations['" + detachAnnotation + "']",
					}}},
				}}},
			},
		},
	}
	if o.sysAdmin {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}},
		}
	}
	if o.probe != "" {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", o.probe}}},
			PeriodSeconds: 1,
		}
	}
	if o.seccomp != "" {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: o.seccomp}}
	}
	return p
}

// DetachRefused is the loop half of issue 37 on a node whose runtime
// denies the loop ioctls (Plinth's own nodes: package runcguard): a pod
// without CAP_SYS_ADMIN runs `losetup -d` on its own block claim's device
// and gets EPERM, under no seccomp profile (Unconfined) and under
// RuntimeDefault, and from a process started by `runc exec` (an exec
// readiness probe, as kubectl exec starts one), and its device still
// serves its image. It returns what each pod's losetup said.
func DetachRefused(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, image, name string) []string {
	t.Helper()
	s := &scenario{t: t, ctx: ctx, client: client, ns: ns, image: image}
	var said []string
	for _, v := range []struct {
		suffix string
		o      podOptions
		script string
	}{
		{"unconfined", podOptions{}, scriptRefused},
		{"runtimedefault", podOptions{seccomp: corev1.SeccompProfileTypeRuntimeDefault}, scriptRefused},
		{"exec", podOptions{probe: probeRefused}, scriptProbed},
	} {
		pname := name + "-" + v.suffix
		own := "OWN-" + token(t)
		s.start(pname, v.script, map[string]string{"OWN": own}, v.o)
		logs := s.waitLog(pname, "read:", startTimeout)
		out, rc, read := lineWith(logs, "losetup:"), lineWith(logs, "detach rc="), lineWith(logs, "read:")
		if rc == "detach rc=0" || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("pod %s: losetup -d %s gave %q, %q; want it refused with EPERM", pname, DevicePath, out, rc)
		}
		if got := strings.TrimSpace(strings.TrimPrefix(read, "read:")); got != own {
			t.Errorf("pod %s: after losetup -d its device reads %q, want its own %q", pname, got, own)
		}
		said = append(said, fmt.Sprintf("%s: %s (%s)", pname, out, rc))
		s.deletePod(pname)
	}
	return said
}

// scriptRefused writes the pod's marker, runs `losetup -d` on its device
// (busybox prints "losetup: <device>: <error>" on failure) and reads the
// device back once.
const scriptRefused = `printf %s "$OWN" | dd of=` + DevicePath + ` conv=fsync 2>/dev/null || exit 1
out=$(losetup -d ` + DevicePath + ` 2>&1); rc=$?
echo "losetup: $out"; echo "detach rc=$rc"
echo "read: $(dd if=` + DevicePath + ` bs=64 count=1 2>/dev/null | tr -d '\000')"
exec sleep 3600`

// scriptProbed writes the pod's marker, waits for the readiness probe
// (probeRefused) to have run `losetup -d`, prints what it said and reads
// the device back once.
const scriptProbed = `printf %s "$OWN" | dd of=` + DevicePath + ` conv=fsync 2>/dev/null || exit 1
touch /own-written
until [ -e /probe-done ]; do sleep 0.2; done
cat /probe-out
echo "read: $(dd if=` + DevicePath + ` bs=64 count=1 2>/dev/null | tr -d '\000')"
exec sleep 3600`

// probeRefused is an exec probe, which the runtime starts with `runc
// exec`: once the marker is written, it runs `losetup -d` once.
const probeRefused = `[ -e /own-written ] && [ ! -e /probe-done ] || exit 0
out=$(losetup -d ` + DevicePath + ` 2>&1); rc=$?
printf 'losetup: %s\ndetach rc=%s\n' "$out" "$rc" > /probe-out
touch /probe-done`

// detach triggers pod A's `losetup -d` and waits until A says it ran.
func (s *scenario) detach(a string) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"now"}}}`, detachAnnotation)
	start := time.Now()
	if _, err := s.client.CoreV1().Pods(s.ns).Patch(s.ctx, a, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		s.t.Fatalf("triggering pod %s's detach: %v", a, err)
	}
	logs := s.waitLog(a, "detach rc=", time.Minute)
	rc := lineWith(logs, "detach rc=")
	if rc != "detach rc=0" {
		// Then nothing was detached, and the rest would pass for nothing.
		s.t.Fatalf("pod %s's losetup -d %s failed (%s), which any pod can do to a device it can open; log:\n%s", a, DevicePath, rc, tail(logs, 8))
	}
	s.t.Logf("pod %s ran losetup -d %s: %s, %.1fs after the trigger", a, DevicePath, rc, time.Since(start).Seconds())
	s.logNode("pod " + a + " detached")
}

// watch reads pod A's log until B's marker shows there (the leak: t
// fails) or, Observe after B wrote, A's latest read shows A's own marker.
func (s *scenario) watch(a, own, mark string) {
	s.t.Helper()
	start := time.Now()
	var logs string
	for {
		if l, err := s.logs(a); err == nil {
			logs = l
		}
		reads := readsAfterDetach(logs)
		if strings.Contains(logs, mark) {
			s.t.Fatalf("pod %s read pod B's marker %q through its own %s: the loop number it detached now serves B's volume (issue 34); %s; A's last lines:\n%s%s",
				a, mark, DevicePath, summary(reads, own, mark), tail(logs, 8), s.nodeNote())
		}
		elapsed := time.Since(start)
		if elapsed >= Observe && len(reads) > 0 && reads[len(reads)-1] == own {
			s.t.Logf("pod %s never read B's marker in %.0fs after B wrote it, and reads its own again; %s", a, elapsed.Seconds(), summary(reads, own, mark))
			return
		}
		if elapsed >= repairTimeout {
			s.t.Fatalf("pod %s's %s does not serve its own image %v after B wrote (want its marker %q); %s; A's last lines:\n%s%s",
				a, DevicePath, elapsed.Round(time.Second), own, summary(reads, own, mark), tail(logs, 8), s.nodeNote())
		}
		select {
		case <-s.ctx.Done():
			s.t.Fatalf("watching pod %s: %v", a, s.ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// readsAfterDetach returns what pod A read after its detach, one entry
// per read.
func readsAfterDetach(logs string) []string {
	_, after, found := strings.Cut(logs, "detach rc=")
	if !found {
		return nil
	}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		if r, ok := strings.CutPrefix(l, "read:"); ok {
			out = append(out, strings.TrimSpace(r))
		}
	}
	return out
}

// summary counts A's reads by what they showed.
func summary(reads []string, own, mark string) string {
	var mine, empty, theirs, other int
	for _, r := range reads {
		switch r {
		case own:
			mine++
		case "":
			empty++
		case mark:
			theirs++
		default:
			other++
		}
	}
	return fmt.Sprintf("A's %d reads after its detach: %d its own marker, %d empty, %d B's marker, %d other", len(reads), mine, empty, theirs, other)
}

// waitLog waits until the pod's log contains want and returns the log. It
// fails t when the pod ends first or the timeout passes, with the Events
// of the pod and of its claim (a failed provision or map says why there).
func (s *scenario) waitLog(name, want string, timeout time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		logs, err := s.logs(name)
		if err == nil && strings.Contains(logs, want) {
			return logs
		}
		p, perr := s.client.CoreV1().Pods(s.ns).Get(s.ctx, name, metav1.GetOptions{})
		ended := perr == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded)
		if ended || time.Now().After(deadline) || s.ctx.Err() != nil {
			// The pod and its claim share the name.
			s.t.Fatalf("waiting %v for %q in the log of pod %s/%s: gave up (pod ended: %v, last error: %v); log:\n%s\nevents of the pod and claim: %s",
				timeout, want, s.ns, name, ended, err, tail(logs, 8), await.Events(s.ctx, s.client, s.ns, name))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (s *scenario) logs(name string) (string, error) {
	b, err := s.client.CoreV1().Pods(s.ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(s.ctx)
	return string(b), err
}

// cleanupTimeout bounds each deletion at the end: the kubelet unpublishes
// a pod's volume before the pod object goes, and the provisioner deletes
// a volume before its PV goes.
const cleanupTimeout = 2 * time.Minute

// deletePod deletes the pod and waits until it is gone, and so its volume
// unpublished. It runs in cleanups too, when s.ctx may have ended.
func (s *scenario) deletePod(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), cleanupTimeout)
	defer cancel()
	pods := s.client.CoreV1().Pods(s.ns)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))}); err != nil {
		if !apierrors.IsNotFound(err) {
			s.t.Errorf("deleting pod %s/%s: %v", s.ns, name, err)
		}
		return
	}
	s.gone(ctx, "pod "+s.ns+"/"+name, func() error { _, err := pods.Get(ctx, name, metav1.GetOptions{}); return err })
}

// deleteClaim deletes the claim and waits until it and its PV are gone
// (the class deletes volumes with their claims).
func (s *scenario) deleteClaim(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), cleanupTimeout)
	defer cancel()
	claims := s.client.CoreV1().PersistentVolumeClaims(s.ns)
	pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			s.t.Errorf("reading claim %s/%s: %v", s.ns, name, err)
		}
		return
	}
	if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.t.Errorf("deleting claim %s/%s: %v", s.ns, name, err)
		return
	}
	s.gone(ctx, "claim "+s.ns+"/"+name, func() error { _, err := claims.Get(ctx, name, metav1.GetOptions{}); return err })
	if pv := pvc.Spec.VolumeName; pv != "" {
		s.gone(ctx, "PV "+pv, func() error {
			_, err := s.client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			return err
		})
	}
}

// gone polls get until it answers NotFound; t gets an error (not a fatal
// one: the other cleanups must still run) when ctx ends first.
func (s *scenario) gone(ctx context.Context, what string, get func() error) {
	s.t.Helper()
	for {
		err := get()
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Errorf("%s still there at the end of the test (%v)", what, err)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// volume names the PV of the claim called name, for the node's view.
func (s *scenario) volume(name string) string {
	pvc, err := s.client.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("claim %s: %v", name, err)
	}
	return "PV " + pvc.Spec.VolumeName
}

// logNode logs the node's loop devices after a step, when the suite can
// see them.
func (s *scenario) logNode(step string) {
	s.t.Helper()
	if s.node != nil {
		s.t.Logf("%s; node: %s", step, s.node())
	}
}

func (s *scenario) nodeNote() string {
	if s.node == nil {
		return ""
	}
	return "\nnode: " + s.node()
}

// token is a random marker suffix: a marker from an earlier run or
// variant can never be mistaken for this one's.
func token(t testing.TB) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// lineWith returns the first line of logs that contains s.
func lineWith(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// tail returns the last n lines of logs.
func tail(logs string, n int) string {
	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
