// Package nodevm runs a Plinth node as what it is: the node image booted
// in a qemu micro-VM, plinth-node as PID 1 supervising containerd, the
// kubelet and the storage services, joined to a control plane of
// test/launch on this host over qemu's user network.
//
// The node's data disk is a file in the work directory that outlives the
// VM: booting again on it is a node reboot (the volumes must still be
// there), and deleting it is a new machine. The configuration disk is
// written from the control plane's credentials for the node at every boot
// (see node/core/nodeconfig).
//
// Needs root: it adds the node's IP to this host's lo (see addHostIP), so
// that the apiserver reaches the kubelet.
package nodevm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/build/microvm"
	"source.plinth.dev/node/core/nodeconfig"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/launch"
)

// Defaults of Config.
const (
	DefaultNodeName = "plinth-vm"
	// DefaultNodeIP is on no network of this host or the guest: the node
	// puts it on its lo, this host on its own lo, and qemu forwards between.
	DefaultNodeIP = "10.0.77.2"
	// DefaultDataSize is the data disk's size (a sparse file; the node
	// formats it XFS with project quotas at its first boot).
	DefaultDataSize = 8 << 30
	// MetricsPort is the usual Config.MetricsPort: plinth-node's metrics
	// and health endpoint, free in the guest and on the node's IP here.
	MetricsPort   = 9101
	DefaultMemory = "3G"
	DefaultCPUs   = 2
	kubeletPort   = nodeconfig.DefaultKubeletPort
	// The guest's side of qemu's user network.
	guestAddress = "10.0.2.15/24"
	guestGateway = launch.GuestHostIP
	podCIDR      = "10.244.0.0/24"
	clusterDNS   = "10.96.0.10"
)

// Config describes the VM node.
type Config struct {
	// Dir is the node's work directory: data disk, config disk, console
	// logs. It is created if missing; an existing data disk is reused.
	Dir string
	// Kernel is the vmlinux to boot; Image the node image (initramfs).
	Kernel string
	Image  string
	// ControlPlane is the control plane the node joins. It should run the
	// scheduler and have the storage objects (launch.ControlPlaneConfig).
	ControlPlane *launch.ControlPlane
	NodeName     string
	NodeIP       string
	DataSize     int64
	Memory       string
	CPUs         int
	// KernelArgs are extra kernel arguments (e.g. plinth.verbosity=2);
	// the words after a "--" among them are plinth-node's flags.
	KernelArgs []string
	// MetricsPort, when not zero, is the port plinth-node serves its
	// metrics on in the guest (--metrics-address), forwarded to the same
	// port of NodeIP on this host (MetricsAddress).
	MetricsPort int
	// Console receives the console of every boot, besides the log files.
	Console io.Writer
}

// Node is a VM node. Boot and Stop may alternate (a reboot); Close ends
// everything.
type Node struct {
	cfg   Config
	creds *launch.RemoteNode
	// DataDisk is the data disk image; ConfigDisk the configuration disk.
	DataDisk   string
	ConfigDisk string

	lock *os.File

	mu    sync.Mutex
	vm    *microvm.VM
	boots int
	log   *os.File
	// lastBootID is the kubelet's boot ID (the kernel's, a random UUID per
	// boot) as the Node showed it before the latest boot: a Node still
	// Ready from before a reboot is not the rebooted node.
	lastBootID string
}

// LockPath is the host-wide lock of the VM node: one runs per host, since
// its IP and the kubelet port on it are the host's (see addHostIP).
const LockPath = "/run/plinth-nodevm.lock"

// New prepares a node: the work directory, the node's credentials and its
// configuration disk. It takes no context: it only writes local files (the
// credentials are issued by the control plane's local CA, no request), and
// every step that waits (Boot, WaitReady, Stop) takes one.
func New(cfg Config) (_ *Node, err error) {
	if cfg.Dir == "" || cfg.Kernel == "" || cfg.Image == "" || cfg.ControlPlane == nil {
		return nil, errors.New("nodevm: Dir, Kernel, Image and ControlPlane are required")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = DefaultNodeIP
	}
	if cfg.DataSize == 0 {
		cfg.DataSize = DefaultDataSize
	}
	if cfg.Memory == "" {
		cfg.Memory = DefaultMemory
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = DefaultCPUs
	}
	if cfg.Console == nil {
		cfg.Console = io.Discard
	}
	ip, err := netip.ParseAddr(cfg.NodeIP)
	if err != nil {
		return nil, fmt.Errorf("nodevm: node IP: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("nodevm: %w", err)
	}
	lock, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nodevm: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("nodevm: another VM node runs on this host (%s is locked): %w", LockPath, err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	creds, err := cfg.ControlPlane.RemoteNode(cfg.NodeName, net.IP(ip.AsSlice()), launch.GuestHostIP)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, creds: creds, lock: lock,
		DataDisk:   filepath.Join(cfg.Dir, "data.img"),
		ConfigDisk: filepath.Join(cfg.Dir, "config.img"),
	}
	if err = n.writeConfigDisk(ip); err != nil {
		return nil, err
	}
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.NodeName }

// writeConfigDisk writes the configuration disk: node.json and the
// credentials, as nodeconfig.Write lays them out.
func (n *Node) writeConfigDisk(ip netip.Addr) error {
	cfg := nodeconfig.Config{
		Node: nodeconfig.Node{
			NodeName:    n.cfg.NodeName,
			Address:     netip.MustParsePrefix(guestAddress),
			Gateway:     netip.MustParseAddr(guestGateway),
			NodeIP:      ip,
			KubeletPort: kubeletPort,
			PodCIDR:     netip.MustParsePrefix(podCIDR),
			ClusterDNS:  netip.MustParseAddr(clusterDNS),
		},
		Kubeconfig:       n.creds.KubeletKubeconfig,
		PlinthKubeconfig: n.creds.PlinthKubeconfig,
		KubeletCert:      n.creds.KubeletCert,
		KubeletKey:       n.creds.KubeletKey,
	}
	var buf bytes.Buffer
	if err := nodeconfig.Write(&buf, cfg); err != nil {
		return fmt.Errorf("nodevm: writing the configuration disk: %w", err)
	}
	// Whole sectors: a block device has no partial last sector.
	for buf.Len()%4096 != 0 {
		buf.WriteByte(0)
	}
	if err := os.WriteFile(n.ConfigDisk, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("nodevm: writing the configuration disk: %w", err)
	}
	return nil
}

// Boot boots the VM, creating a blank data disk if there is none. It
// returns once qemu runs; WaitReady waits for the node.
func (n *Node) Boot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.vm != nil {
		select {
		case <-n.vm.Done():
		default:
			return errors.New("nodevm: the VM is running")
		}
	}
	if _, err := os.Stat(n.DataDisk); errors.Is(err, os.ErrNotExist) {
		f, err := os.Create(n.DataDisk)
		if err != nil {
			return fmt.Errorf("nodevm: creating the data disk: %w", err)
		}
		err = f.Truncate(n.cfg.DataSize)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("nodevm: creating the data disk: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("nodevm: data disk: %w", err)
	}
	n.lastBootID = ""
	if node, err := n.cfg.ControlPlane.Client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{}); err == nil {
		n.lastBootID = node.Status.NodeInfo.BootID
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("nodevm: reading the node before booting: %w", err)
	}
	ip := net.ParseIP(n.cfg.NodeIP)
	if err := addHostIP(ctx, ip); err != nil {
		return fmt.Errorf("nodevm: %w", err)
	}
	n.boots++
	logPath := filepath.Join(n.cfg.Dir, fmt.Sprintf("console-%d.log", n.boots))
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("nodevm: %w", err)
	}
	n.log = log
	args := append([]string{
		// Warnings reach the console: a soft lockup's report prints
		// its stacks at the default level (warning), which loglevel=4
		// hid, and SysRq got no answer from a stuck guest.
		"loglevel=5", "sysrq_always_enabled",
		// A soft lockup prints every CPU's stack, not only the stuck
		// one's: the console then says what the others held.
		"softlockup_all_cpu_backtrace=1",
		"plinth.data=/dev/vda", "plinth.config=/dev/vdb",
		"plinth.hostname=" + n.cfg.NodeName,
		// A test VM that fails should end, not reboot forever.
		"plinth.onfailure=poweroff",
	}, n.cfg.KernelArgs...)
	forwards := []microvm.Forward{{HostIP: n.cfg.NodeIP, HostPort: kubeletPort, GuestPort: kubeletPort}}
	if p := n.cfg.MetricsPort; p != 0 {
		if !slices.Contains(args, "--") {
			args = append(args, "--")
		}
		args = append(args, fmt.Sprintf("--metrics-address=0.0.0.0:%d", p))
		forwards = append(forwards, microvm.Forward{HostIP: n.cfg.NodeIP, HostPort: p, GuestPort: p})
	}
	vm, err := microvm.Start(context.WithoutCancel(ctx), microvm.Config{
		Kernel:     n.cfg.Kernel,
		Initrd:     n.cfg.Image,
		KernelArgs: args,
		Memory:     n.cfg.Memory,
		CPUs:       n.cfg.CPUs,
		Disks: []microvm.Disk{
			{Path: n.DataDisk, Serial: "plinth-data"},
			{Path: n.ConfigDisk, Serial: "plinth-config", ReadOnly: true},
		},
		Network:  true,
		Forwards: forwards,
		Console:  io.MultiWriter(log, n.cfg.Console),
	})
	if err != nil {
		log.Close()
		return fmt.Errorf("nodevm: %w", err)
	}
	n.vm = vm
	return nil
}

// MetricsAddress is where this host reaches plinth-node's metrics
// endpoint (host:port), or "" when Config.MetricsPort is zero.
func (n *Node) MetricsAddress() string {
	if n.cfg.MetricsPort == 0 {
		return ""
	}
	return net.JoinHostPort(n.cfg.NodeIP, strconv.Itoa(n.cfg.MetricsPort))
}

// VM is the running VM of the latest boot (nil before the first).
func (n *Node) VM() *microvm.VM {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.vm
}

// WaitReady waits until the node of the latest boot (a boot ID the Node
// did not show before it) is Ready and its CSI plugin registered with the
// kubelet (the CSINode lists the driver): a node whose pods can use Plinth
// volumes. It fails early if the VM ends.
func (n *Node) WaitReady(ctx context.Context) error {
	vm := n.VM()
	if vm == nil {
		return errors.New("nodevm: not booted")
	}
	client := n.cfg.ControlPlane.Client
	var last string
	for {
		ready, why := n.ready(ctx, client)
		if ready {
			return nil
		}
		last = why
		select {
		case <-vm.Done():
			return fmt.Errorf("nodevm: the VM ended before the node was ready (%s; qemu: %v)", last, vm.Err())
		case <-ctx.Done():
			return fmt.Errorf("nodevm: node %s not ready: %s: %w", n.cfg.NodeName, last, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func (n *Node) ready(ctx context.Context, client kubernetes.Interface) (bool, string) {
	node, err := client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "the node has not registered"
	}
	if err != nil {
		return false, err.Error()
	}
	if ready, why := n.Booted(node); !ready {
		return false, why
	}
	csiNode, err := client.StorageV1().CSINodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, "CSINode: " + err.Error()
	}
	if !DriverRegistered(csiNode) {
		return false, "node Ready, but " + names.DriverName + " has not registered with the kubelet"
	}
	return true, ""
}

// Booted reports whether node, this node's Node object, shows the latest
// boot Ready: a boot ID it did not show before Boot, and the Ready
// condition true. If not, it says why.
func (n *Node) Booted(node *corev1.Node) (bool, string) {
	n.mu.Lock()
	last := n.lastBootID
	n.mu.Unlock()
	if id := node.Status.NodeInfo.BootID; id == "" || id == last {
		return false, "the node shows the boot ID of before the boot (" + last + ")"
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return false, fmt.Sprintf("node not Ready: %s: %s", c.Reason, c.Message)
			}
			return true, ""
		}
	}
	return false, "node has no Ready condition yet"
}

// DriverRegistered reports whether csiNode lists Plinth's driver: the
// kubelet has registered its CSI plugin, and pods can mount its volumes.
func DriverRegistered(csiNode *storagev1.CSINode) bool {
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == names.DriverName {
			return true
		}
	}
	return false
}

// Stop shuts the node down cleanly: SysRq-e sends SIGTERM to every process
// but init, as a service manager would; plinth-node stops its tree and
// init powers the VM off. If that does not end the VM within timeout, it
// is killed and Stop says so.
func (n *Node) Stop(ctx context.Context, timeout time.Duration) error {
	vm := n.VM()
	if vm == nil {
		return nil
	}
	defer n.closeLog()
	select {
	case <-vm.Done():
		return nil
	default:
	}
	if err := vm.SysRq('e'); err != nil {
		return errors.Join(err, vm.Kill())
	}
	select {
	case <-vm.Done():
		return nil
	case <-time.After(timeout):
		return errors.Join(fmt.Errorf("nodevm: the node did not power off within %s after SIGTERM; killed", timeout), vm.Kill())
	case <-ctx.Done():
		return errors.Join(ctx.Err(), vm.Kill())
	}
}

// PowerCut ends the VM at once, like pulling the plug.
func (n *Node) PowerCut() error {
	vm := n.VM()
	if vm == nil {
		return nil
	}
	defer n.closeLog()
	return vm.Kill()
}

func (n *Node) closeLog() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.log != nil {
		n.log.Close()
		n.log = nil
	}
}

// Close stops the VM (cleanly if it can) and removes the host's side of
// its network. The work directory stays: the data disk is the node's.
func (n *Node) Close(ctx context.Context) error {
	err := n.Stop(ctx, 2*time.Minute)
	if rerr := removeHostIP(context.WithoutCancel(ctx), net.ParseIP(n.cfg.NodeIP)); rerr != nil && n.VM() != nil {
		err = errors.Join(err, rerr)
	}
	n.lock.Close()
	return err
}
