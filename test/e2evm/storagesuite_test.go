package e2evm

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/images"
	"source.plinth.dev/test/storagesuite/suite"
)

// unusedVolumesFocus selects the spec of Kubernetes' storage suite that
// the host cluster skips by name (see skip in test/storagesuite), in both
// of its patterns Plinth provisions: a pod lists a claim among its volumes
// but mounts (or maps) it in no container, and the kubelet must then leave
// it out of the pod's directory. The spec checks that from a host-exec pod
// (agnhost, privileged) that enters PID 1's mount namespace with nsenter
// and lists /var/lib/kubelet/pods/<uid>/volumes and volumeDevices: on the
// VM node PID 1 is plinth-node, and /var/lib/kubelet leads to the kubelet's
// root on the data partition (/data/kubelet, linked by plinth-node's
// init), neither of which the host offers.
const unusedVolumesFocus = `External.Storage.*\[Testpattern: Dynamic PV \((filesystem|block) volmode\)\] volumeMode should not mount / map unused volumes in a pod`

// TestStorageSuiteUnusedVolumes runs that spec from e2e.test against the
// VM node with Plinth's driver definition, and requires exactly its two
// patterns to run and pass. The node image carries the suite's images
// (build/scripts/test-e2e-vm.sh).
//
// The spec passes without looking when the pod's directory is not where it
// looks ("test ! -d" succeeds, nothing is listed), so the test first
// requires that the spec's vantage point sees the kubelet's pods.
func TestStorageSuiteUnusedVolumes(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	checkVantage(ctx, t, w)
	passed := runVMSpecs(ctx, t, w, "unused volumes", unusedVolumesFocus)
	for _, mode := range []string{"filesystem volmode", "block volmode"} {
		n := 0
		for _, p := range passed {
			if strings.Contains(p, mode) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d passed specs of pattern %q, want 1 (passed: %v)", n, mode, passed)
		}
	}
}

// runVMSpecs runs the storage suite's specs of focus against the VM node
// with Plinth's driver definition, fails the test for every spec that
// fails or is skipped (the node has all they need), and returns the names
// of those that passed.
func runVMSpecs(ctx context.Context, t *testing.T, w *world, what, focus string) []string {
	t.Helper()
	bin, err := suite.Binaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := suite.Config{
		Bin: bin, Kubeconfig: w.cp.Kubeconfig,
		Focus: focus, Procs: 1, Timeout: 15 * time.Minute,
		// The link to the node's kubelet root (the spec itself hard-codes
		// this path).
		KubeletRootDir: "/var/lib/kubelet",
		OutDir:         filepath.Join(workDir, "storage-suite", strings.ReplaceAll(what, " ", "-")),
	}
	t.Logf("running ginkgo %s", strings.Join(cfg.Args(), " "))
	res, err := suite.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	t.Logf("%s on the VM node: %d selected, %d passed, %d failed, %d skipped; wall time %s",
		what, s.Selected, len(s.Passed), len(s.Failed), len(s.Skipped), res.Wall.Round(time.Second))
	for _, f := range s.Failed {
		t.Errorf("FAILED %s\n    %s", f.Name, f.Message)
	}
	for _, sk := range s.Skipped {
		t.Errorf("skipped on a node that has all it needs: %s\n    %s", sk.Name, sk.Message)
	}
	if res.Err != nil && len(s.Failed) == 0 {
		t.Errorf("ginkgo failed (%v) but no spec did; see %s", res.Err, res.Log)
	}
	if t.Failed() {
		t.Logf("full output: %s (kept with the work directory)", res.Log)
	}
	var passed []string
	for _, p := range s.Passed {
		passed = append(passed, p.Name)
	}
	return passed
}

// vantageScript runs in a privileged pod with the node's / at /rootfs and
// does what the spec's host-exec pod does: enter PID 1's mount namespace
// and look for a pod's directory under /var/lib/kubelet, here its own.
const vantageScript = `nsenter --mount=/rootfs/proc/1/ns/mnt -- sh -c '
if test -d "/var/lib/kubelet/pods/$POD_UID/volumes"; then echo "VANTAGE seen"
else echo "VANTAGE missing: $(ls -ld /var/lib/kubelet /var/lib/kubelet/pods 2>&1 | tr "\n" " ")"; fi'
sleep 3600`

// checkVantage fails the test unless a pod that enters PID 1's mount
// namespace, as the spec's host-exec pod does, finds its own directory
// under /var/lib/kubelet/pods: the place the spec lists.
func checkVantage(ctx context.Context, t *testing.T, w *world) {
	t.Helper()
	ns := newNamespace(t, w, "vantage")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vantage"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", vantageScript},
				Env:             []corev1.EnvVar{{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "rootfs", MountPath: "/rootfs"}},
			}},
			Volumes: []corev1.Volume{{Name: "rootfs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
	if _, err := w.cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	line, err := waitLog(ctx, w, ns, pod.Name, "VANTAGE", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if line != "VANTAGE seen" {
		t.Fatalf("in PID 1's mount namespace the node has no /var/lib/kubelet/pods/<uid>/volumes for a running pod, so the spec would list nothing and pass: %s", line)
	}
}
