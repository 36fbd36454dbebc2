// Package controllertest is the test world of the node's controllers: one
// real etcd + kube-apiserver + kube-controller-manager per test binary
// (from test/launch; the PV controller binds claims and releases volumes
// exactly as in a cluster; the API server keeps an audit log of the calls
// plinth-node processes make with the node identity), and per test a
// namespace, a StorageClass, a node name and a data directory with its
// volume manager, so tests do not see each other's work. The tests of the provisioner, the resizer, the
// capacity publisher, node removal, clusterobjects, the placer and the
// shared informers (internal/controller) share it; only tests import it,
// which is why it lives under test/, beside test/launch.
package controllertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/snapshotapi"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/volumetest"
)

var controlPlane struct {
	once sync.Once
	cp   *launch.ControlPlane
	err  error
	// scheduler and snapshots are set by Tests before any test runs
	// (WithScheduler, WithSnapshotAPI).
	scheduler, snapshots bool
	// lateSnapshots starts the snapshot API in cp once, for a binary
	// started without it (SnapshotAPI).
	lateSnapshots    sync.Once
	lateSnapshotsErr error
}

// Option changes the control plane a test binary starts.
type Option func()

// WithScheduler also starts kube-scheduler and creates the CSIDriver and
// default StorageClass as an installer does: for tests of where pods are
// placed (Node objects made by the test stand in for kubelets).
func WithScheduler() Option { return func() { controlPlane.scheduler = true } }

// WithSnapshotAPI also installs the snapshot.storage.k8s.io CRDs and runs
// the snapshot-controller with distributed snapshotting, as every cluster
// test/launch starts does (launch.ControlPlaneConfig.SnapshotAPI; the
// binaries from $PLINTH_SNAPSHOT_BIN, else built): for the tests of the
// node's snapshot controller.
func WithSnapshotAPI() Option { return func() { controlPlane.snapshots = true } }

// Main runs a test binary's tests and then stops its control plane, if
// one was started, and removes the plinth-node it built, if it built one.
// Call it from TestMain.
func Main(m *testing.M) { os.Exit(Tests(m).Run()) }

// Tests is m, whose Run also does what Main does after the tests: for a
// package that calls ktest.Main (so that `make test-kernel` runs it in
// the VM too),
//
//	func TestMain(m *testing.M) { ktest.Main(controllertest.Tests(m)) }
func Tests(m *testing.M, opts ...Option) interface{ Run() int } {
	for _, o := range opts {
		o()
	}
	return tests{m}
}

type tests struct{ m *testing.M }

func (t tests) Run() int {
	code := t.m.Run()
	removeNodeBinary()
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
	return code
}

// ControlPlane returns the test binary's control plane, starting it on
// first use. It never skips but under -short: the control plane needs
// neither root nor a node, so it runs wherever the Kubernetes binaries can
// be built.
func ControlPlane(t testing.TB) *launch.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	controlPlane.once.Do(func() {
		dir, err := os.MkdirTemp("", "plinth-ctl-")
		if err != nil {
			controlPlane.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cfg := launch.ControlPlaneConfig{
			Dir:                   dir,
			ControllerManagerArgs: []string{"--kube-api-qps=500", "--kube-api-burst=1000"},
			// Every API call of a plinth-node process, for the tests that
			// check what a node did (NodeCalls).
			AuditGroups: []string{clusterobjects.NodeAgentGroup},
			// And the admission server's, for the tests of its placer.
			AuditUsers:     []string{clusterobjects.AdmissionUser},
			Scheduler:      controlPlane.scheduler,
			StorageObjects: controlPlane.scheduler,
			SnapshotAPI:    controlPlane.snapshots,
		}
		if testing.Verbose() {
			cfg.Log = os.Stderr
		}
		controlPlane.cp, controlPlane.err = launch.StartControlPlane(ctx, cfg)
	})
	if controlPlane.err != nil {
		t.Fatalf("starting control plane: %v", controlPlane.err)
	}
	return controlPlane.cp
}

// NewControlPlane starts a control plane of the test's own, stopped when
// the test ends, for tests that do to a cluster what the shared one must
// not suffer (restore its etcd) or that need a second cluster.
func NewControlPlane(t testing.TB) *launch.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	dir, err := os.MkdirTemp("", "plinth-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := launch.ControlPlaneConfig{Dir: dir}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cp, err := launch.StartControlPlane(ctx, cfg)
	if err != nil {
		t.Fatalf("starting a control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(context.Background()); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	return cp
}

// NodeClient is a client of the control plane with a node agent's
// restricted rights (the control plane's own node's identity, in the group
// NodeProcess's per-node identities are in too), for tests that check what
// a node may do.
func NodeClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := launch.KubeconfigClient(ControlPlane(t).NodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NodeAgentClient is a client of the control plane with node's own node
// agent identity (the one NodeProcess runs node with).
func NodeAgentClient(t testing.TB, node string) kubernetes.Interface {
	t.Helper()
	path, err := ControlPlane(t).NodeAgentKubeconfig(node)
	if err != nil {
		t.Fatal(err)
	}
	c, err := launch.KubeconfigClient(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Env is one test's world: a namespace, a StorageClass, a node name and a
// data directory with its volume manager.
type Env struct {
	T testing.TB
	// CP is the control plane the env is in (ControlPlane's, or one of
	// the test's own: NewEnvOn).
	CP     *launch.ControlPlane
	Client kubernetes.Interface
	// Snapshots is a client of the snapshot API with Client's identity;
	// the control plane serves the API only WithSnapshotAPI.
	Snapshots snapclient.Interface
	NS        string
	Class     string
	Node      string
	Vols      *volume.Manager
	Dir       string
}

// RetryBase and RetryMax are the per-key retry backoff the controllers'
// tests give a controller (controller.Base): short enough for a test to
// see several retries.
const (
	RetryBase = 100 * time.Millisecond
	RetryMax  = 2 * time.Second
)

// NewEnv prepares a test's (or a benchmark's) world. allowUnenforced
// decides whether filesystem volumes are accepted without quota (the
// host's filesystem enforces none; the kernel-test VM's does: there the
// data directory is on the VM's XFS disk with prjquota).
func NewEnv(t testing.TB, allowUnenforced bool) *Env {
	t.Helper()
	return NewEnvOn(t, ControlPlane(t), allowUnenforced)
}

// NewEnvOn is NewEnv in the control plane cp.
func NewEnvOn(t testing.TB, cp *launch.ControlPlane, allowUnenforced bool) *Env {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-")
	ctx := context.Background()
	create := func() error {
		_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	err := create()
	if apierrors.IsAlreadyExists(err) {
		// The same test or benchmark again in this control plane (go test
		// -count=N, or the testing package calling a benchmark with rising
		// b.N): its earlier run's objects stay, so this one gets names of
		// its own.
		name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e9)
		err = create()
	}
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	snapshots, err := snapshotapi.NewClient(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, CP: cp, Client: cp.Client, Snapshots: snapshots, NS: name, Class: "sc-" + name, Node: "node-" + name}
	e.CreateClass(e.Class, corev1.PersistentVolumeReclaimDelete, nil)
	e.Dir = t.TempDir()
	if ktest.InVM() {
		e.Dir = ktest.TempDir(t, "xfs")
		// Registered after TempDir's removal, so it runs before it.
		t.Cleanup(func() { clearQuotas(t, e.Dir) })
	}
	e.Vols = NewVolumes(t, e.Dir, allowUnenforced)
	return e
}

// NewVolumes places a data tree in dir and returns a volume manager over
// it, probing quota support like the node does.
func NewVolumes(t testing.TB, dir string, allowUnenforced bool) *volume.Manager {
	t.Helper()
	d, qerr := volumetest.DataDir(t, dir)
	m, err := volume.New(volume.Config{Data: d, QuotaError: qerr, AllowUnenforced: allowUnenforced})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// clearQuotas takes the project quotas off the volume directories in the
// data directory dir before it is removed: the VM's XFS disk is shared by
// every test, and limits outlive the files they limited, so a later test
// counting quota records would see this one's.
func clearQuotas(t testing.TB, dir string) {
	d := new(localstorage.DataDirectory)
	if err := d.Place(dir); err != nil {
		t.Errorf("clearing quotas in %s: %v", dir, err)
		return
	}
	ents, err := os.ReadDir(d.Volumes.FullPath())
	if err != nil {
		t.Errorf("clearing quotas in %s: %v", dir, err)
		return
	}
	for _, en := range ents {
		if en.IsDir() {
			if err := fsquota.ClearQuota(filepath.Join(d.Volumes.FullPath(), en.Name())); err != nil {
				t.Errorf("clearing quotas in %s: %v", dir, err)
			}
		}
	}
}

// CreateClass creates a StorageClass of our driver, removed when the test
// ends. Like the node's default class it binds on first consumer and
// allows expansion.
func (e *Env) CreateClass(name string, reclaim corev1.PersistentVolumeReclaimPolicy, params map[string]string) {
	e.T.Helper()
	e.CreateClassFor(names.DriverName, name, reclaim, params)
}

// CreateClassFor is CreateClass for any provisioner.
func (e *Env) CreateClassFor(provisioner, name string, reclaim corev1.PersistentVolumeReclaimPolicy, params map[string]string) {
	e.T.Helper()
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	expand := true
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name},
		Provisioner:          provisioner,
		ReclaimPolicy:        &reclaim,
		VolumeBindingMode:    &binding,
		AllowVolumeExpansion: &expand,
		Parameters:           params,
	}
	if _, err := e.Client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		e.T.Fatalf("creating StorageClass %s: %v", name, err)
	}
	e.T.Cleanup(func() {
		_ = e.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// CreateImmediateClass creates a StorageClass of our driver that binds
// immediately (no scheduler places its claims: the admission server's
// placer does), removed when the test ends. With hosts, its
// allowedTopologies admit only the nodes whose hostname label is one of
// them.
func (e *Env) CreateImmediateClass(name string, hosts ...string) {
	e.T.Helper()
	binding := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       names.DriverName,
		VolumeBindingMode: &binding,
	}
	if hosts != nil {
		sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: names.TopologyKeyHostname, Values: hosts}}}}
	}
	if _, err := e.Client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		e.T.Fatalf("creating StorageClass %s: %v", name, err)
	}
	e.T.Cleanup(func() {
		_ = e.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// The annotations the scheduler and the PV controller put on a claim for
// its provisioner, spelled as Kubernetes spells them (the controllers'
// own constants are internal to node/kubernetes).
const (
	annSelectedNode           = "volume.kubernetes.io/selected-node"
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
)

// Claim is a claim as the scheduler and PV controller leave it for the
// provisioner: annotated with our driver and the selected node. Zero
// fields mean 16Mi, Filesystem, ReadWriteOnce, the env's class and node,
// and the GA provisioner annotation.
type Claim struct {
	Name    string
	Size    string
	Mode    corev1.PersistentVolumeMode
	Access  []corev1.PersistentVolumeAccessMode
	Class   string
	Node    string
	BetaAnn bool
}

// CreateClaim creates c in the env's namespace.
func (e *Env) CreateClaim(c Claim) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(context.Background(), e.ClaimObject(c), metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating claim %s: %v", c.Name, err)
	}
	return pvc
}

// ClaimObject is the object CreateClaim creates.
func (e *Env) ClaimObject(c Claim) *corev1.PersistentVolumeClaim {
	if c.Size == "" {
		c.Size = "16Mi"
	}
	if c.Mode == "" {
		c.Mode = corev1.PersistentVolumeFilesystem
	}
	if c.Access == nil {
		c.Access = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if c.Class == "" {
		c.Class = e.Class
	}
	if c.Node == "" {
		c.Node = e.Node
	}
	ann := map[string]string{annSelectedNode: c.Node}
	if c.BetaAnn {
		ann[annBetaStorageProvisioner] = names.DriverName
	} else {
		ann[annStorageProvisioner] = names.DriverName
	}
	mode := c.Mode
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: e.NS, Annotations: ann},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      c.Access,
			StorageClassName: &c.Class,
			VolumeMode:       &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(c.Size),
			}},
		},
	}
}

// SetRequest sets claim name's storage request, as `kubectl patch` does
// when a user grows a claim.
func (e *Env) SetRequest(name, size string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{
		"requests": map[string]string{"storage": size}}}})
	if err != nil {
		return err
	}
	_, err = e.Client.CoreV1().PersistentVolumeClaims(e.NS).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Eventually polls cond until it returns true or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
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

// WaitBound waits up to a minute until claim name is Bound and returns it
// and its PV.
func (e *Env) WaitBound(name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	e.T.Helper()
	return e.WaitBoundWithin(name, time.Minute)
}

// WaitBoundWithin is WaitBound with its timeout: longer for a claim the
// kube-controller-manager binds in the kernel-test VM, whose controllers
// start late.
func (e *Env) WaitBoundWithin(name string, timeout time.Duration) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	e.T.Helper()
	var pvc *corev1.PersistentVolumeClaim
	Eventually(e.T, timeout, "claim "+name+" Bound", func() (bool, error) {
		var err error
		pvc, err = e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimBound, err
	})
	pv, err := e.Client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		e.T.Fatalf("reading PV of %s: %v", name, err)
	}
	return pvc, pv
}

// Events returns the Events about an object, by UID.
func (e *Env) Events(uid types.UID) []corev1.Event {
	e.T.Helper()
	list, err := e.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(uid)).String(),
	})
	if err != nil {
		e.T.Fatalf("listing events: %v", err)
	}
	return list.Items
}

// WaitEvent waits for an Event with reason whose message contains substr.
func (e *Env) WaitEvent(uid types.UID, reason, substr string) corev1.Event {
	e.T.Helper()
	var found corev1.Event
	Eventually(e.T, 30*time.Second, fmt.Sprintf("event %s %q", reason, substr), func() (bool, error) {
		for _, ev := range e.Events(uid) {
			if ev.Reason == reason && strings.Contains(ev.Message, substr) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// VolumeIDs lists the IDs of the volumes in the env's data directory.
func (e *Env) VolumeIDs() []string {
	e.T.Helper()
	return ListIDs(e.T, e.Vols)
}

// ListIDs lists the IDs of the volumes of m.
func ListIDs(t testing.TB, m *volume.Manager) []string {
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

// CreateNode registers a Ready Node object named name, with hostname
// label host and room for pods, as a kubelet would, and deletes it when
// the test ends. It stands in for a kubelet where only the object matters:
// what owns a node's capacity objects, what the scheduler places pods on.
func (e *Env) CreateNode(name, host string) *corev1.Node {
	e.T.Helper()
	room := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.TopologyKeyHostname: host}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			Capacity:    room,
			Allocatable: room,
		},
	}
	made, err := e.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating Node %s: %v", name, err)
	}
	e.T.Cleanup(func() { _ = e.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return made
}

// NoPV asserts that no PV exists for the claim: none names it in its
// claimRef, whatever the PV's name.
func (e *Env) NoPV(uid types.UID) {
	e.T.Helper()
	pvs, err := e.Client.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.T.Fatalf("listing PVs: %v", err)
	}
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.UID == uid {
			e.T.Errorf("PV %s exists for claim %s/%s; want none", pv.Name, ref.Namespace, ref.Name)
		}
	}
}

// FileExists reports whether p exists.
func FileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
