// Package cluster is the world of the node benchmarks that need only a
// control plane (footprint, fleet): a bare control plane from test/launch,
// plinth-node and its peers as processes the benchmark can measure and
// stop, and claims made as the scheduler and the PV controller leave them
// for a node's provisioner. It copies the idea of the controllers' test
// world (test/controllertest).
package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/bench/procstat"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/tether"
	"source.plinth.dev/test/launch"
)

// The annotations the scheduler and the PV controller put on a claim that
// waits for its first consumer once a pod using it is placed.
const (
	AnnSelectedNode       = "volume.kubernetes.io/selected-node"
	AnnStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
)

// ControlPlane is a started control plane and its API server's process.
type ControlPlane struct {
	*launch.ControlPlane
	// APIServer is kube-apiserver's process ID.
	APIServer int
}

// Start starts a bare control plane in dir (which must not exist or be
// empty) whose PV controller binds at the rate a benchmark creates
// volumes, not at the default client rate.
func Start(ctx context.Context, dir string) (*ControlPlane, error) {
	cp, err := launch.StartControlPlane(ctx, launch.ControlPlaneConfig{
		Dir:                   dir,
		ControllerManagerArgs: []string{"--kube-api-qps=500", "--kube-api-burst=1000"},
	})
	if err != nil {
		return nil, fmt.Errorf("starting control plane: %w", err)
	}
	pid, err := procstat.Child(os.Getpid(), "kube-apiserver")
	if err != nil {
		_ = cp.Stop(context.Background())
		return nil, fmt.Errorf("finding kube-apiserver: %w", err)
	}
	return &ControlPlane{ControlPlane: cp, APIServer: pid}, nil
}

// Client is an admin client with its own rate limit, speaking protobuf
// as plinth-node's client does.
func (cp *ControlPlane) Client(qps float32, burst int) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(cp.RESTConfig)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// BuildPlinthNode builds plinth-node from the repository around the
// working directory into dir.
func BuildPlinthNode(ctx context.Context, dir string) (string, error) {
	repo, err := launch.RepoRoot(".")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "plinth-node")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./node/cmd/plinth-node")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building plinth-node: %w\n%s", err, out)
	}
	return bin, nil
}

// PlinthNodeArgs are the flags of a plinth-node serving node with its
// tree under dir, as the controllers' process tests run it: no kubelet,
// the host's filesystem without quota, the node's own identity.
func PlinthNodeArgs(cp *ControlPlane, node, dir string) ([]string, error) {
	kubeconfig, err := cp.NodeAgentKubeconfig(node)
	if err != nil {
		return nil, err
	}
	return []string{
		"--root=" + filepath.Join(dir, "root"),
		"--data-dir=" + filepath.Join(dir, "data"),
		"--node-name=" + node,
		"--kubeconfig=" + kubeconfig,
		"--allow-unenforced-capacity",
	}, nil
}

// Process is a program the benchmark started and measures.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts bin with args, its output appended to log. It dies
// with the benchmark.
func StartProcess(name, bin string, args, env []string, log string) (*Process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := tether.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() { <-exited; close(p.done) }()
	return p, nil
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group and waits for the process,
// killing it after 30 s.
func (p *Process) Stop() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
	}
}

// CreateClass creates a StorageClass of provisioner that binds on first
// consumer and deletes volumes with their claims.
func CreateClass(ctx context.Context, c kubernetes.Interface, name, provisioner string) error {
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	_, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       provisioner,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating StorageClass %s: %w", name, err)
	}
	return nil
}

// RegisterNode creates what a node's kubelet registers for it: the Node
// object (its hostname label is the node's name) and the CSINode listing
// Plinth's driver. A plinth-node without them is not a node the cluster
// knows: its capacity publisher has no Node to own its objects and
// retries, and, with no CSINode listing the driver, every such node takes
// itself for the node-removal actor and lists every Plinth PV each
// minute, background load no real cluster has.
func RegisterNode(ctx context.Context, c kubernetes.Interface, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.TopologyKeyHostname: name}}}
	if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: PlinthDriver, NodeID: name, TopologyKeys: []string{names.TopologyKeyHostname},
		}}},
	}
	if _, err := c.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CSINode %s: %w", name, err)
	}
	return nil
}

// Claim is a 1 MiB filesystem claim of class for provisioner on node, as
// the scheduler and the PV controller leave it once a pod using it is
// placed: what a node's provisioner acts on.
func Claim(ns, name, class, provisioner, node string) *corev1.PersistentVolumeClaim {
	mode := corev1.PersistentVolumeFilesystem
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			AnnSelectedNode:       node,
			AnnStorageProvisioner: provisioner,
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			VolumeMode:       &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Mi"),
			}},
		},
	}
}

// PlinthClass is the name of the StorageClass of Plinth's driver the
// benchmarks create.
const PlinthClass = "plinth"

// PlinthDriver is Plinth's provisioner name.
const PlinthDriver = names.DriverName

// CreateNamespace creates namespace ns.
func CreateNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return nil
}

// Parallel runs fn(i) for i in [0,n), at most workers at a time, and
// returns the first error.
func Parallel(n, workers int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}

// WaitBound polls until at least want claims in ns are Bound, or timeout.
// It lists every few seconds: this runs while the benchmark sets up, not
// while it measures.
func WaitBound(ctx context.Context, c kubernetes.Interface, ns string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("listing claims: %w", err)
		}
		bound := 0
		for _, pvc := range list.Items {
			if pvc.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		if bound >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d claims in %s Bound after %s", bound, want, ns, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
		}
	}
}

// WaitReady polls plinth-node's /readyz at addr (its --metrics-address)
// until it answers 200: every controller has filled its informers and
// runs. A process restarted on volumes it provisioned before is then in
// the state it would be in had it never stopped.
func WaitReady(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/readyz"
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("asking %s: %w", url, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last answer: %s)", url, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// WorkDir creates a program's results directory out and a temporary work
// directory for its processes' logs and data, named prefix and a random
// suffix: keep prefix short, since the processes' sockets live under it
// and a unix socket's path holds at most 107 bytes. Deferred with the run's
// error, done removes the work directory after a success and keeps it
// after a failure, printing where, since its logs say what went wrong.
func WorkDir(program, prefix, out string) (tmp string, done func(err error), err error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", nil, fmt.Errorf("creating results directory: %w", err)
	}
	if tmp, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, fmt.Errorf("creating work directory: %w", err)
	}
	return tmp, func(err error) {
		if err == nil {
			_ = os.RemoveAll(tmp)
		} else {
			fmt.Fprintf(os.Stderr, "%s: logs kept in %s\n", program, tmp)
		}
	}, nil
}
