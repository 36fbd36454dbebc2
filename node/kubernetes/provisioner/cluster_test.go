package provisioner

// Controller tests against a real etcd + kube-apiserver +
// kube-controller-manager (the PV controller binds claims and releases
// volumes, exactly as in a cluster). One control plane serves every test of
// the package; each test has its own namespace, node name, StorageClass and
// data directory, so they do not see each other's work.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/node/kubernetes/volume/volumetest"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/launch"
)

var controlPlane struct {
	once sync.Once
	cp   *launch.ControlPlane
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cp := controlPlane.cp; cp != nil {
		if err := cp.Stop(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "stopping control plane: %v\n", err)
			code = 1
		}
		if code == 0 {
			_ = os.RemoveAll(cp.Dir)
		} else {
			fmt.Fprintf(os.Stderr, "control plane logs kept in %s\n", cp.LogDir)
		}
	}
	os.Exit(code)
}

// cluster returns the package's control plane, starting it on first use.
// It never skips: the control plane needs neither root nor a node, so it
// runs wherever the Kubernetes binaries can be built.
func cluster(t testing.TB) *launch.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	controlPlane.once.Do(func() {
		dir, err := os.MkdirTemp("", "plinth-prov-")
		if err != nil {
			controlPlane.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		var logw = os.Stderr
		if !testing.Verbose() {
			logw = nil
		}
		cfg := launch.ControlPlaneConfig{Dir: dir, ControllerManagerArgs: []string{"--kube-api-qps=500", "--kube-api-burst=1000"}}
		if logw != nil {
			cfg.Log = logw
		}
		controlPlane.cp, controlPlane.err = launch.StartControlPlane(ctx, cfg)
	})
	if controlPlane.err != nil {
		t.Fatalf("starting control plane: %v", controlPlane.err)
	}
	return controlPlane.cp
}

// env is one test's world: a namespace, a StorageClass, a node name and a
// data directory with its volume manager.
type env struct {
	t      *testing.T
	client kubernetes.Interface
	ns     string
	class  string
	node   string
	vols   *volume.Manager
	dir    string
}

// newEnv prepares a test's world. allowUnenforced decides whether
// filesystem volumes are accepted without quota (the host's filesystem
// enforces none).
func newEnv(t *testing.T, allowUnenforced bool) *env {
	t.Helper()
	cp := cluster(t)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-")
	e := &env{t: t, client: cp.Client, ns: name, class: "sc-" + name, node: "node-" + name}
	ctx := context.Background()
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	e.createClass(e.class, corev1.PersistentVolumeReclaimDelete, nil)
	e.dir = t.TempDir()
	e.vols = newVolumes(t, e.dir, allowUnenforced)
	return e
}

func newVolumes(t testing.TB, dir string, allowUnenforced bool) *volume.Manager {
	t.Helper()
	d, qerr := volumetest.DataDir(t, dir)
	m, err := volume.New(volume.Config{Data: d, QuotaError: qerr, AllowUnenforced: allowUnenforced})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) createClass(name string, reclaim corev1.PersistentVolumeReclaimPolicy, params map[string]string) {
	e.t.Helper()
	e.createClassFor(names.DriverName, name, reclaim, params)
}

func (e *env) createClassFor(provisioner, name string, reclaim corev1.PersistentVolumeReclaimPolicy, params map[string]string) {
	e.t.Helper()
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       provisioner,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
		Parameters:        params,
	}
	if _, err := e.client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating StorageClass %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		_ = e.client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// controller returns a controller for this env's node.
func (e *env) controller() *Controller {
	return &Controller{
		Client:            e.client,
		Driver:            names.DriverName,
		NodeName:          e.node,
		Volumes:           e.vols,
		OrphanGracePeriod: time.Hour,
		RetryBase:         100 * time.Millisecond,
		RetryMax:          2 * time.Second,
	}
}

// start runs c under a supervisor until the test ends (or stop is called).
func (e *env) start(c *Controller) (stop func()) {
	e.t.Helper()
	cancel, _ := supervisor.TestHarness(e.t, c.Run)
	return cancel
}

// claim is a claim as the scheduler and PV controller leave it for us:
// annotated with our driver and the selected node.
type claim struct {
	name    string
	size    string
	mode    corev1.PersistentVolumeMode
	access  []corev1.PersistentVolumeAccessMode
	class   string
	node    string
	betaAnn bool
}

func (e *env) createClaim(c claim) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), e.claimObject(c), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating claim %s: %v", c.name, err)
	}
	return pvc
}

func (e *env) claimObject(c claim) *corev1.PersistentVolumeClaim {
	if c.size == "" {
		c.size = "16Mi"
	}
	if c.mode == "" {
		c.mode = corev1.PersistentVolumeFilesystem
	}
	if c.access == nil {
		c.access = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if c.class == "" {
		c.class = e.class
	}
	if c.node == "" {
		c.node = e.node
	}
	ann := map[string]string{annSelectedNode: c.node}
	if c.betaAnn {
		ann[annBetaStorageProvisioner] = names.DriverName
	} else {
		ann[annStorageProvisioner] = names.DriverName
	}
	mode := c.mode
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: e.ns, Annotations: ann},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      c.access,
			StorageClassName: &c.class,
			VolumeMode:       &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(c.size),
			}},
		},
	}
}

// eventually polls cond until it returns true or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) waitBound(name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	e.t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	eventually(e.t, 60*time.Second, "claim "+name+" Bound", func() (bool, error) {
		var err error
		pvc, err = e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimBound, err
	})
	pv, err := e.client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("reading PV of %s: %v", name, err)
	}
	return pvc, pv
}

// events returns the Events about an object, by UID.
func (e *env) events(uid types.UID) []corev1.Event {
	e.t.Helper()
	list, err := e.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(uid)).String(),
	})
	if err != nil {
		e.t.Fatalf("listing events: %v", err)
	}
	return list.Items
}

// waitEvent waits for an Event with reason whose message contains substr.
func (e *env) waitEvent(uid types.UID, reason, substr string) corev1.Event {
	e.t.Helper()
	var found corev1.Event
	eventually(e.t, 30*time.Second, fmt.Sprintf("event %s %q", reason, substr), func() (bool, error) {
		for _, ev := range e.events(uid) {
			if ev.Reason == reason && strings.Contains(ev.Message, substr) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// volumeIDs lists the IDs of the volumes in the env's data directory.
func (e *env) volumeIDs() []string {
	e.t.Helper()
	return listIDs(e.t, e.vols)
}

func listIDs(t testing.TB, m *volume.Manager) []string {
	t.Helper()
	ents, err := m.List(context.Background())
	if err != nil {
		t.Fatalf("listing volumes: %v", err)
	}
	var ids []string
	for _, en := range ents {
		ids = append(ids, en.ID)
	}
	return ids
}

// noPV asserts that no PV exists for the claim.
func (e *env) noPV(uid types.UID) {
	e.t.Helper()
	_, err := e.client.CoreV1().PersistentVolumes().Get(context.Background(), volumeIDFor(uid), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		e.t.Errorf("PV %s exists (or error %v); want none", volumeIDFor(uid), err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
