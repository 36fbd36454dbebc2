package snapshots

// Controller tests against a real etcd + kube-apiserver +
// kube-controller-manager with the snapshot API: the snapshot.storage.k8s.io
// CRDs and the snapshot-controller, run with distributed snapshotting as
// in every cluster test/launch starts (controllertest.WithSnapshotAPI). The
// volume engine is a real one, on an XFS with reflink where a snapshot
// must be made (volumetest.ReflinkXFS), on the host's filesystem where
// its lack of copy-on-write copies is the point.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/launch"
)

func TestMain(m *testing.M) { os.Exit(controllertest.Tests(m, controllertest.WithSnapshotAPI()).Run()) }

// env is a test's world (controllertest.Env) with a snapshot API client.
type env struct {
	*controllertest.Env
	snaps snapclient.Interface
}

// newEnv prepares a test's world whose volume engine is vols, or the
// env's own on the host's filesystem (no reflink) when vols is nil.
func newEnv(t *testing.T, vols *volume.Manager) *env {
	t.Helper()
	return newEnvOn(t, controllertest.ControlPlane(t), vols)
}

// newEnvOn is newEnv in the control plane cp.
func newEnvOn(t *testing.T, cp *launch.ControlPlane, vols *volume.Manager) *env {
	t.Helper()
	e := controllertest.NewEnvOn(t, cp, true)
	if vols != nil {
		e.Vols = vols
	}
	cfg := rest.CopyConfig(e.CP.RESTConfig)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	c, err := snapclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: e, snaps: c}
}

// base is the controllers' configuration of these tests.
func (e *env) base() controller.Base {
	return controller.Base{Client: e.Client, Driver: names.DriverName, NodeName: e.Node,
		RetryBase: controllertest.RetryBase, RetryMax: controllertest.RetryMax}
}

// startSnapshots runs the controller under test for the env's node until
// the test ends, counting into m if it is not nil.
func (e *env) startSnapshots(m ...*metrics.Metrics) {
	e.T.Helper()
	base := e.base()
	if len(m) > 0 {
		base.Metrics = m[0]
	}
	c, err := New(Config{Base: base, Snapshots: e.snaps, Volumes: e.Vols})
	if err != nil {
		e.T.Fatal(err)
	}
	supervisor.TestHarness(e.T, c.Run)
}

// startProvisioner runs a provisioner for the env's node, so that claims
// get volumes and PVs as in a cluster.
func (e *env) startProvisioner() {
	e.T.Helper()
	p, err := provisioner.New(provisioner.Config{Base: e.base(), Volumes: e.Vols, Snapshots: e.Snapshots, OrphanGracePeriod: time.Hour})
	if err != nil {
		e.T.Fatal(err)
	}
	supervisor.TestHarness(e.T, p.Run)
}

// volume makes a volume of mode and size in the engine, under a fresh
// volume ID as the provisioner names them, and returns its ID.
func (e *env) volume(mode volume.Mode, size int64) string {
	e.T.Helper()
	id := ownership.VolumeIDFor(uuid.NewUUID())
	if _, err := e.Vols.Create(context.Background(), id, mode, size); err != nil {
		e.T.Fatal(err)
	}
	return id
}

// createClass creates a VolumeSnapshotClass of the driver with policy and
// params, named for the env and suffix, removed when the test ends.
func (e *env) createClass(suffix string, policy crdv1.DeletionPolicy, params map[string]string) string {
	e.T.Helper()
	name := "vsc-" + e.NS + "-" + suffix
	class := &crdv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: names.DriverName, DeletionPolicy: policy, Parameters: params}
	if _, err := e.snaps.SnapshotV1().VolumeSnapshotClasses().Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		_ = e.snaps.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// createSnapshot snapshots claim as a user does.
func (e *env) createSnapshot(name, claim, class string) *crdv1.VolumeSnapshot {
	e.T.Helper()
	vs := &crdv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: crdv1.VolumeSnapshotSpec{
			Source:                  crdv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim},
			VolumeSnapshotClassName: &class,
		},
	}
	made, err := e.snaps.SnapshotV1().VolumeSnapshots(e.NS).Create(context.Background(), vs, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return made
}

// content is a VolumeSnapshotContent as the snapshot-controller makes one
// for a VolumeSnapshot (dynamic: source a volume handle), or as an
// administrator pre-provisions one (static: source a snapshot handle),
// labelled for node, of VolumeSnapshotClass class (none when empty).
type content struct {
	name, node     string
	volume, handle string
	policy         crdv1.DeletionPolicy
	class          string
}

// create creates c, bound to a VolumeSnapshot of the env's namespace that
// does not exist (so the snapshot-controller leaves it to the node), and
// deletes it when the test ends.
func (e *env) create(c content) *crdv1.VolumeSnapshotContent {
	e.T.Helper()
	if c.policy == "" {
		c.policy = crdv1.VolumeSnapshotContentRetain
	}
	obj := &crdv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: map[string]string{ownership.LabelSnapshotManagedBy: c.node}},
		Spec: crdv1.VolumeSnapshotContentSpec{
			Driver:            names.DriverName,
			DeletionPolicy:    c.policy,
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: e.NS, Name: "vs-" + c.name},
		},
	}
	if c.class != "" {
		obj.Spec.VolumeSnapshotClassName = &c.class
	}
	if c.volume != "" {
		obj.Spec.Source.VolumeHandle = &c.volume
		obj.Spec.VolumeSnapshotRef.UID = uuid.NewUUID()
	} else {
		obj.Spec.Source.SnapshotHandle = &c.handle
	}
	made, err := e.snaps.SnapshotV1().VolumeSnapshotContents().Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { e.forget(c.name) })
	return made
}

// forget deletes content name, removing its finalizers first.
func (e *env) forget(name string) {
	ctx := context.Background()
	api := e.snaps.SnapshotV1().VolumeSnapshotContents()
	if _, err := api.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.T.Errorf("removing the finalizers of content %s: %v", name, err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.T.Errorf("deleting content %s: %v", name, err)
	}
}

// get reads content name.
func (e *env) get(name string) (*crdv1.VolumeSnapshotContent, error) {
	return e.snaps.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), name, metav1.GetOptions{})
}

// waitStatus waits until content name's status satisfies ok, and returns
// the content.
func (e *env) waitStatus(name, what string, ok func(*crdv1.VolumeSnapshotContentStatus) bool) *crdv1.VolumeSnapshotContent {
	e.T.Helper()
	var c *crdv1.VolumeSnapshotContent
	controllertest.Eventually(e.T, 60*time.Second, "content "+name+" "+what, func() (bool, error) {
		var err error
		if c, err = e.get(name); err != nil {
			return false, err
		}
		return c.Status != nil && ok(c.Status), fmt.Errorf("status %s", describe(c.Status))
	})
	return c
}

// waitError waits for an error in content name's status that contains
// substr, and an Event with reason saying the same.
func (e *env) waitError(name, reason, substr string) {
	e.T.Helper()
	c := e.waitStatus(name, "failed with "+substr, func(s *crdv1.VolumeSnapshotContentStatus) bool {
		return s.Error != nil && s.Error.Message != nil && strings.Contains(*s.Error.Message, substr) &&
			s.ReadyToUse != nil && !*s.ReadyToUse
	})
	e.WaitEvent(c.UID, reason, substr)
}

// describe is a content status for failure messages.
func describe(s *crdv1.VolumeSnapshotContentStatus) string {
	if s == nil {
		return "<none>"
	}
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	var msg *string
	if s.Error != nil {
		msg = s.Error.Message
	}
	ready := "<nil>"
	if s.ReadyToUse != nil {
		ready = fmt.Sprint(*s.ReadyToUse)
	}
	return fmt.Sprintf("handle %s ready %s error %s", str(s.SnapshotHandle), ready, str(msg))
}
