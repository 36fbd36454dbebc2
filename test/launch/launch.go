// Package launch runs a real single-node Kubernetes cluster on this host:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
// snapshot-controller (with the snapshot.storage.k8s.io CRDs), containerd,
// the patched kubelet and (when given) plinth-node, as child processes of
// the caller, in one work directory.
//
// It backs `make run` (cmd/plinth-launch) and every Go test that needs a
// cluster (see Shared), so tests and developers exercise the same setup.
// Nothing is faked: certificates are real, RBAC and NodeRestriction are on,
// the node's data directory is XFS on a loop device as on a Plinth node.
//
// Only one cluster runs per host (LockPath). Teardown deletes all pods
// through the API so kubelet and containerd undo their mounts and network
// namespaces, stops the components, then sweeps whatever is left (processes,
// mounts, loop devices, netns, the CNI bridge, kubepods cgroups) and reports
// anything it could not remove.
//
// Two parts live in packages of their own: the cluster's certificates in
// launch/pki, and the host cleanup (baseline, sweep, leftovers, snapshots)
// in launch/host.
package launch

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/test/launch/host"
	"source.plinth.dev/test/launch/pki"
)

const (
	// podCIDR is the node's pod network (bridge + host-local IPAM).
	podCIDR = "10.244.0.0/24"
	// serviceCIDR is the ClusterIP range; 10.96.0.1 is the apiserver's.
	serviceCIDR = "10.96.0.0/16"
	// DefaultDataSize is the size of the sparse XFS data image.
	DefaultDataSize = 16 << 30
	// markerFile marks a directory as a launcher work directory, the only
	// kind launch ever wipes.
	markerFile = ".plinth-launch"
)

// Config says what to launch.
type Config struct {
	// Dir is the work directory. It is created, or wiped if it is an old
	// work directory; a non-empty directory of anything else is refused.
	// Keep it short: unix socket paths below it must fit 108 bytes.
	Dir string
	// KubernetesBin is the directory with etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler, kubelet and kubectl. Empty
	// means KubernetesBinaries (env PLINTH_K8S_BIN, else build.sh).
	KubernetesBin string
	// DataSize is the size in bytes of the node's XFS data filesystem
	// (sparse). Zero means DefaultDataSize.
	DataSize int64
	// DataDirectIO attaches the data filesystem's image with direct I/O
	// (loop.Options.DirectIO), so that its I/O reaches this host's disk
	// rather than this host's page cache, as a node's data disk is a
	// disk; Start fails if the kernel runs the device buffered. Off, the
	// default, the page cache serves the data filesystem's reads, which
	// keeps make run and the tests quick but makes a data-path benchmark
	// measure memory, and how much of each file happens to be cached
	// (bench/datapath sets it).
	DataDirectIO bool
	// Images are extra image tarballs to import into containerd (the pause
	// and busybox images are always built and imported).
	Images []string
	// PlinthNode, when set, starts plinth-node once the apiserver is up.
	PlinthNode *PlinthNode
	// UpstreamKubelet, when set, is an unpatched kubelet binary
	// (third_party/kubernetes/upstream-kubelet.sh) to run instead of the
	// patched one, with losetup on its PATH: the kubelet most clusters run,
	// block-volume pseudo-locks included.
	UpstreamKubelet string
	// SnapshotBin is the directory with the snapshot-controller and the
	// snapshot.storage.k8s.io CRDs (what third_party/snapshotter/build.sh
	// prints). Empty means SnapshotControllerBinaries (env
	// PLINTH_SNAPSHOT_BIN, else build.sh). Every cluster has the snapshot
	// API.
	SnapshotBin string
	// GVisorBin, when set, is the directory with runsc and
	// containerd-shim-runsc-v1 (third_party/gvisor/build.sh): containerd
	// gets the runtime handler GVisorHandler and the cluster the
	// RuntimeClass GVisorRuntimeClass. Empty: pods run under runc only.
	GVisorBin string
	// MaxPods is the kubelet's maxPods; zero keeps its default (110).
	// Benchmarks that run hundreds of pods on the one node raise it.
	MaxPods int
	// ControllerManagerArgs are further kube-controller-manager flags, for
	// experiments only (say, its client rate limit, to see what it
	// costs): clusters users run have the defaults, and so must the
	// figures a benchmark reports.
	ControllerManagerArgs []string
	// KubeletArgs are further kubelet flags (after its configuration
	// file, so they override it), for experiments only, like
	// ControllerManagerArgs: say, --kube-api-qps, to see what the
	// kubelet's client rate limit costs.
	KubeletArgs []string
	// AuditGroups, if set, makes the API server keep an audit log of the
	// requests made by members of these groups (Cluster.AuditEvents), for
	// experiments that count which component made which calls; it costs
	// the API server a line of JSON per request.
	AuditGroups []string
	// AuditUsers, if set, audits the requests of these users too.
	AuditUsers []string
	// NoAdmissionWebhook leaves out the admission webhook this process
	// serves (package admission): for a cluster that installs its own, as
	// deploy/ does (test/deploy).
	NoAdmissionWebhook bool
	// WaitForLock waits for another cluster on this host to stop instead of
	// failing with *BusyError.
	WaitForLock bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// PlinthNode is the hook that runs plinth-node as part of the cluster.
type PlinthNode struct {
	// Binary is the plinth-node executable (go build ./node/cmd/plinth-node).
	Binary string
	// Args returns its arguments from the cluster's paths; nil means
	// PlinthNodeArgs.
	Args func(Paths) []string
}

// Paths are where a running cluster keeps things.
type Paths struct {
	// Dir is the work directory.
	Dir string
	// Kubeconfig is an admin (system:masters) kubeconfig.
	Kubeconfig string
	// NodeKubeconfig is plinth-node's kubeconfig: the restricted identity
	// of a node agent (group clusterobjects.NodeAgentGroup, bound to
	// clusterobjects.ClusterRole).
	NodeKubeconfig string
	// DataDir is the mount point of the node's XFS data filesystem.
	DataDir string
	// QuotaEnforced is false when this kernel cannot enforce XFS project
	// quotas (no CONFIG_XFS_QUOTA); the filesystem is then mounted without.
	QuotaEnforced bool
	// KubeletRootDir is kubelet's --root-dir (below DataDir); CSI plugins
	// register in its plugins_registry and serve under its plugins.
	KubeletRootDir string
	// KubeletPATH is the only PATH the kubelet gets: a directory of links to
	// the host tools it needs. It deliberately has no losetup.
	KubeletPATH string
	// ContainerdSocket is containerd's gRPC socket.
	ContainerdSocket string
	// LogDir holds one <component>.log per process.
	LogDir string
	// BinDir holds the Kubernetes binaries, kubectl included.
	BinDir string
	// SnapshotBin holds the snapshot-controller and its CRDs (crd/*.yaml)
	// when the cluster has the snapshot API: every Cluster, and a
	// ControlPlane with ControlPlaneConfig.SnapshotAPI. Empty otherwise.
	SnapshotBin string
	// GVisorBin holds runsc and its containerd shim when the cluster has
	// the gVisor runtime (Config.GVisorBin); empty otherwise. See Runtimes.
	GVisorBin string
	// NodeName and NodeIP identify the node.
	NodeName string
	NodeIP   string
	// APIServerURL is the apiserver's https URL.
	APIServerURL string
	// PlinthNodeMetrics is the host:port of plinth-node's metrics and
	// health endpoint (--metrics-address; /metrics, /healthz, /readyz).
	PlinthNodeMetrics string
}

// Cluster is a running cluster. Stop it exactly once.
type Cluster struct {
	Paths
	// Client is an admin clientset; RESTConfig the config behind it.
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	// Timings records how long start-up phases took.
	Timings []Timing

	cfg         Config
	logw        io.Writer
	pki         *pki.PKI
	base        host.Baseline
	lock        *os.File
	cniBinDir   string
	kubeletPort int
	etcdURL     string
	etcdPeerURL string
	apiPort     int
	started     time.Time
	// apiServerArgs are further kube-apiserver flags (the audit log).
	apiServerArgs []string
	// audited is set when the API server keeps an audit log.
	audited bool
	// snapshots is set when the cluster has the snapshot API (startSnapshotAPI).
	snapshots bool
	// admission is the admission webhook this process serves.
	admission *admissionServer

	// agentKubeconfigs are the node-agent kubeconfigs written so far, by
	// node (NodeAgentKubeconfig).
	agentsMu         sync.Mutex
	agentKubeconfigs map[string]string

	mu      sync.Mutex
	procs   []*process
	failed  chan struct{}
	failErr error
	stopped bool
}

// Timing is one start-up phase and when it finished, counted from Start.
type Timing struct {
	Phase string
	At    time.Duration
}

// Failed is closed when a component exits unexpectedly; Err says which.
func (c *Cluster) Failed() <-chan struct{} { return c.failed }

// Err returns why the cluster failed, or nil.
func (c *Cluster) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failErr
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.logw, "launch: "+format+"\n", args...)
}

func (c *Cluster) mark(phase string) {
	at := time.Since(c.started)
	c.Timings = append(c.Timings, Timing{Phase: phase, At: at})
	c.logf("%-28s %6.1fs", phase, at.Seconds())
}

// fail records the first component failure and closes Failed.
func (c *Cluster) fail(p *process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failErr != nil || c.stopped {
		return
	}
	c.failErr = p.failure()
	close(c.failed)
}

// nodeName turns the host name into a valid Node name (a lower-case DNS
// subdomain).
func nodeName() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading host name: %w", err)
	}
	h = strings.ToLower(h)
	h = regexp.MustCompile(`[^a-z0-9.-]+`).ReplaceAllString(h, "-")
	h = strings.Trim(h, "-.")
	if h == "" {
		h = "plinth-node"
	}
	return h, nil
}

// nodeIP picks the address kubelet registers: the source address of the
// default route, or else the first global IPv4 address. Kubelet refuses a
// loopback node IP.
func nodeIP() (string, error) {
	if conn, err := net.Dial("udp4", "192.0.2.1:9"); err == nil { // no packet is sent
		ip := conn.LocalAddr().(*net.UDPAddr).IP
		conn.Close()
		if ip.IsGlobalUnicast() {
			return ip.String(), nil
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("listing network interfaces: %w", err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || iface.Name == host.BridgeName {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("finding the node IP: no global IPv4 address on any interface")
}

// FreePorts asks the kernel for n distinct unused TCP ports (bound on all
// addresses, so each is free for loopback and the node IP alike). Another
// process could take one before the component binds it; the host lock keeps
// our own launches from racing, which is what matters in practice.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		// Held open until all are chosen, so no port is handed out twice.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// prepareDir creates dir, or empties an old work directory. It refuses to
// touch a non-empty directory that launch did not create.
func prepareDir(dir string, base host.Baseline) error {
	entries, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return fmt.Errorf("reading work directory: %w", err)
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
			return fmt.Errorf("work directory %s is not empty and was not made by launch; refusing to wipe it", dir)
		}
		if err := host.Sweep(dir, base); err != nil {
			return fmt.Errorf("cleaning old work directory: %w", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing old work directory: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating work directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), nil, 0o644); err != nil {
		return fmt.Errorf("marking work directory: %w", err)
	}
	return nil
}

// waitFor polls cond every interval until it returns true or an error, the
// context ends, or a component fails.
func (c *Cluster) waitFor(ctx context.Context, what string, interval time.Duration, cond func(context.Context) (bool, error)) error {
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-c.failed:
			return fmt.Errorf("waiting for %s: %w", what, c.Err())
		case <-time.After(interval):
		}
	}
}

// PID returns the process ID of a running component ("kubelet",
// "containerd", "kube-apiserver", ...), or 0 if there is none.
func (c *Cluster) PID(component string) int {
	if p := c.running(component); p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}
