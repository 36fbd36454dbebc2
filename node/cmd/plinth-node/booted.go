package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/imagelayout"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/network"
	"source.plinth.dev/node/core/nodeconfig"
	"source.plinth.dev/node/kubernetes/containerd"
	"source.plinth.dev/node/kubernetes/kubelet"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// A booted node with a configuration disk (--config-device, from
// plinth.config= on the kernel command line) is a whole Kubernetes node:
// beyond what plinth-node does anywhere, it formats a blank data disk,
// brings up its network and runs containerd and the kubelet. The programs
// and files it runs are where the node image puts them (the paths are
// named by node/core/imagelayout and installed by build/nodeimage; what
// else the image and the node agree on is in docs/design.md, "The node
// image"); what it makes at run time is here:
const (
	// uplink is the node's only network link besides lo.
	uplink = "eth0"
	// containerdState is containerd's runtime directory and socket.
	containerdState  = "/run/containerd"
	containerdSocket = containerdState + "/containerd.sock"
	// runscState holds the state of gVisor's sandboxes, in images built
	// with runsc (imagelayout.Runsc): the node then gives containerd the
	// runsc runtime.
	runscState = "/run/runsc"
)

// configDeviceWait bounds how long the node waits for the configuration
// disk to appear: its driver probes while init loads modules, so it is
// normally there at once.
const configDeviceWait = 30 * time.Second

// bootedNode is what the configuration disk adds to the node.
type bootedNode struct {
	cfg  *nodeconfig.Config
	tree *localstorage.Root
}

// loadBootedNode reads the configuration disk and applies what must be
// settled before the tree starts: the node name (the disk's wins over
// --node-name), the host name, and plinth-node's own kubeconfig.
func loadBootedNode(ctx context.Context, log logtree.LeveledLogger, o *options, tree *localstorage.Root) (*bootedNode, error) {
	cfg, err := readConfigDevice(ctx, o.configDevice)
	if err != nil {
		return nil, err
	}
	if o.node.NodeName != "" && o.node.NodeName != cfg.Node.NodeName {
		log.Warningf("node name %q from the command line is replaced by %q from the configuration disk", o.node.NodeName, cfg.Node.NodeName)
	}
	o.node.NodeName = cfg.Node.NodeName
	if err := unix.Sethostname([]byte(cfg.Node.NodeName)); err != nil {
		return nil, fmt.Errorf("setting host name %q: %w", cfg.Node.NodeName, err)
	}
	if cfg.PlinthKubeconfig != nil && o.kube.Kubeconfig == "" {
		p := filepath.Join(tree.Ephemeral.FullPath(), "plinth-kubeconfig")
		if err := os.WriteFile(p, cfg.PlinthKubeconfig, 0o600); err != nil {
			return nil, fmt.Errorf("writing plinth-node's kubeconfig: %w", err)
		}
		o.kube.Kubeconfig = p
	}
	mode := "kubelet standalone"
	if cfg.Kubeconfig != nil {
		mode = "kubelet with kubeconfig"
	}
	storage := "no storage services (no plinth-kubeconfig)"
	if o.kube.Kubeconfig != "" {
		storage = "storage services with " + o.kube.Kubeconfig
	}
	log.Infof("configuration disk %s: node %s, %s on %s via %s, node IP %s, pods %s; %s; %s",
		o.configDevice, cfg.Node.NodeName, cfg.Node.Address, uplink, cfg.Node.Gateway, cfg.Node.NodeIP, cfg.Node.PodCIDR, mode, storage)
	return &bootedNode{cfg: cfg, tree: tree}, nil
}

// readConfigDevice reads the configuration disk, waiting for it to appear.
func readConfigDevice(ctx context.Context, dev string) (*nodeconfig.Config, error) {
	deadline := time.Now().Add(configDeviceWait)
	for {
		_, err := os.Stat(dev)
		if err == nil {
			return nodeconfig.ReadDevice(dev)
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return nil, fmt.Errorf("configuration disk: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apply adds the booted node's parts to the root's configuration: the
// configured node name, the first-boot format and the network.
func (b *bootedNode) apply(c *core.Config) {
	n := b.cfg.Node
	c.NodeName = n.NodeName
	if c.DataMount != nil {
		c.DataMount.FormatIfBlank = true
	}
	c.Network = &network.Config{Uplink: uplink, Address: n.Address, Gateway: n.Gateway, NodeIP: n.NodeIP}
	// The node owns the kubelet's and containerd's layout, all on the
	// data partition: their directories are the node share, so that
	// images, emptyDirs and logs cannot take the room volumes were
	// promised (volume.NodeShare).
	c.NodeShare.Dirs = []string{b.tree.Kubelet.FullPath(), b.containerdRoot(), b.podLogsDir()}
}

// containerdRoot is containerd's root (images, snapshots, the containers'
// writable layers), on the data partition.
func (b *bootedNode) containerdRoot() string {
	return filepath.Join(b.tree.Data.FullPath(), "containerd")
}

// podLogsDir is where the kubelet keeps the pods' logs, on the data
// partition.
func (b *bootedNode) podLogsDir() string {
	return filepath.Join(b.tree.Data.FullPath(), "pod-logs")
}

// kubeletService is containerd, the image import and the kubelet.
func (b *bootedNode) kubeletService() core.Service {
	eph := b.tree.Ephemeral.FullPath()
	cd := containerd.Config{
		ConfigFile: filepath.Join(eph, "containerd", "config.toml"),
		Root:       b.containerdRoot(),
		State:      containerdState,
		Socket:     containerdSocket,
		CNIBinDir:  imagelayout.CNIBinDir,
		CNIConfDir: filepath.Join(eph, "cni", "net.d"),
		// Containers get runc through plinth-node's wrapper.
		RuncGuard: imagelayout.Init,
	}
	if _, err := os.Stat(imagelayout.Runsc); err == nil {
		cd.Runsc = &containerd.Runsc{
			Handler:    containerd.RunscHandler,
			ConfigPath: filepath.Join(eph, "containerd", "runsc.toml"),
			Binary:     imagelayout.Runsc,
			Root:       runscState,
			Logs:       filepath.Join(eph, "runsc"),
		}
	}
	node := kubelet.Node{
		Containerd: cd,
		CNI: containerd.CNI{
			Bridge:  "plinth0",
			PodCIDR: b.cfg.Node.PodCIDR.String(),
			IPAMDir: filepath.Join(eph, "cni", "ipam"),
		},
		Kubelet: kubelet.Config{
			RootDir:          b.tree.Kubelet.FullPath(),
			ConfigDir:        filepath.Join(eph, "kubelet"),
			PodLogsDir:       b.podLogsDir(),
			Node:             b.cfg.Node,
			Kubeconfig:       b.cfg.Kubeconfig,
			ContainerdSocket: containerdSocket,
			ServingCert:      b.cfg.KubeletCert,
			ServingKey:       b.cfg.KubeletKey,
		},
		ImagesDir: imagelayout.ImageDir,
	}
	return core.Service{Name: "kubelet", Runnable: func(*core.Env) supervisor.Runnable { return node.Runnable() }}
}
