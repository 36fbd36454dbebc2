package resizer

// Controller tests against a real etcd + kube-apiserver +
// kube-controller-manager (controllertest): the provisioner makes and binds
// the volumes, the tests raise claims' requests as a user would, and the
// resizer under test grows them.

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/ktest"
)

// TestMain runs the tests and stops the control plane; through ktest.Main
// `make test-kernel` also runs the crash test in the VM, with quotas
// enforced (build/scripts/test-kernel.sh).
func TestMain(m *testing.M) { ktest.Main(controllertest.Tests(m)) }

// env is a test's world (see controllertest.Env) with the resizer's own
// helpers.
type env struct{ *controllertest.Env }

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{controllertest.NewEnv(t, true)}
}

// base is the controller configuration of these tests for node.
func (e *env) base(node string) controller.Base {
	return controller.Base{Client: e.Client, Driver: names.DriverName, NodeName: node,
		RetryBase: controllertest.RetryBase, RetryMax: controllertest.RetryMax}
}

// startProvisioner runs a provisioner for node with vols until the test
// ends.
func (e *env) startProvisioner(node string, vols *volume.Manager) {
	e.T.Helper()
	p, err := provisioner.New(provisioner.Config{Base: e.base(node), Volumes: vols, Snapshots: e.Snapshots, OrphanGracePeriod: time.Hour})
	if err != nil {
		e.T.Fatal(err)
	}
	supervisor.TestHarness(e.T, p.Run)
}

// startResizer runs the resizer under test for the env's node until the
// test ends (or stop is called).
func (e *env) startResizer() (stop func()) {
	e.T.Helper()
	return e.startResizerWith(nil)
}

// startResizerWith runs the resizer of the env's node on clk (the real
// clock when nil).
func (e *env) startResizerWith(clk clock.WithTicker) (stop func()) {
	e.T.Helper()
	base := e.base(e.Node)
	if clk != nil {
		base.Clock = clk
	}
	r, err := New(Config{Base: base, Volumes: e.Vols})
	if err != nil {
		e.T.Fatal(err)
	}
	stop, _ = supervisor.TestHarness(e.T, r.Run)
	return stop
}

// start runs the provisioner and the resizer of the env's node.
func (e *env) start() {
	e.startProvisioner(e.Node, e.Vols)
	e.startResizer()
}

// request sets claim name's storage request, as `kubectl patch` does.
func (e *env) request(name, size string) error { return e.SetRequest(name, size) }

// mustRequest is request, failing the test on an error.
func (e *env) mustRequest(name, size string) {
	e.T.Helper()
	if err := e.request(name, size); err != nil {
		e.T.Fatalf("raising the request of %s to %s: %v", name, size, err)
	}
}

func (e *env) claim(name string) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatalf("reading claim %s: %v", name, err)
	}
	return pvc
}

// waitResized waits until claim name has capacity size and no resize in
// progress, and returns it.
func (e *env) waitResized(name, size string, timeout time.Duration) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	want := resource.MustParse(size)
	var pvc *corev1.PersistentVolumeClaim
	controllertest.Eventually(e.T, timeout, "claim "+name+" resized to "+size, func() (bool, error) {
		var err error
		pvc, err = e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := pvc.Status.Capacity[corev1.ResourceStorage]
		_, resizing := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
		return c.Cmp(want) == 0 && !resizing, fmt.Errorf("capacity %s, status %v", c.String(), pvc.Status.AllocatedResourceStatuses)
	})
	return pvc
}

// assertResized checks everything a finished resize of claim name to size
// leaves: claim status, PV capacity, the volume itself.
func (e *env) assertResized(name, size string) {
	e.T.Helper()
	want := resource.MustParse(size)
	pvc := e.claim(name)
	if c := pvc.Status.Capacity[corev1.ResourceStorage]; c.Cmp(want) != 0 {
		e.T.Errorf("%s: status.capacity %s, want %s", name, c.String(), size)
	}
	if a := pvc.Status.AllocatedResources[corev1.ResourceStorage]; a.Cmp(want) != 0 {
		e.T.Errorf("%s: status.allocatedResources %s, want %s", name, a.String(), size)
	}
	if s, ok := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
		e.T.Errorf("%s: resize status %q left behind", name, s)
	}
	for _, c := range pvc.Status.Conditions {
		if resizeConditions[c.Type] {
			e.T.Errorf("%s: condition %s left behind", name, c.Type)
		}
	}
	pv, err := e.Client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	if c := pv.Spec.Capacity[corev1.ResourceStorage]; c.Cmp(want) != 0 {
		e.T.Errorf("%s: PV capacity %s, want %s", name, c.String(), size)
	}
	st, err := e.Vols.Stat(context.Background(), pvc.Spec.VolumeName)
	if err != nil || st.CapacityBytes != want.Value() {
		e.T.Errorf("%s: volume capacity %d (%v), want %d", name, st.CapacityBytes, err, want.Value())
	}
}

// attach serves a block volume's image through a loop device, as a
// published volume is served, until the test ends.
func (e *env) attach(id string, readOnly bool) *loop.Device {
	e.T.Helper()
	_, image, err := e.Vols.Locate(context.Background(), id)
	if err != nil {
		e.T.Fatal(err)
	}
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		e.T.Fatal(err)
	}
	defer f.Close()
	d, err := loop.Create(f, loop.Options{ReadOnly: readOnly})
	if err != nil {
		e.T.Fatalf("attaching %s: %v", image, err)
	}
	e.T.Cleanup(func() { _ = d.Remove() })
	return d
}

// eventCount sums the counts of the Events with reason about uid.
func (e *env) eventCount(uid types.UID, reason string) int {
	e.T.Helper()
	n := 0
	for _, ev := range e.Events(uid) {
		if ev.Reason == reason {
			n += int(max(ev.Count, 1))
		}
	}
	return n
}
