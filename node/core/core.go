// Package core is the logic of plinth-node: the root runnable of its
// supervision tree.
//
// The root prepares the node's directory tree (mounting the data partition
// on a real node), finds out what the data filesystem can do, opens the
// node's one volume engine, and then starts the node's services as its
// children:
//
//	root
//	  datadir      format if blank + mount (node mode) + create the data tree + probe quotas
//	  volumes      the volume.Manager; Recover settles what a crash interrupted;
//	               the node share's quota set up (Config.NodeShare)
//	  network      lo, uplink, default route, node IP (booted node with a configuration)
//	  nodeshare    fits the node share's limit to the volumes' promise, audits its trees
//	  quotawatch   puts files moved out of their volume's project quota back as they are
//	               written (quotawatch.go; where quotas are enforced)
//	  <service>... e.g. "kubernetes", "csi", added by the command from its config
//
// Every service is handed the same Env, and in it the same volume.Manager:
// there is one per data directory, because its per-volume locks only work
// within one Manager (the provisioner deleting a volume and the CSI plugin
// publishing it must serialise on the same lock).
//
// Services are a list the caller passes in (Config.Services), so this
// package knows nothing of Kubernetes: node/cmd/plinth-node composes the
// node, and node/kubernetes plugs in with its Service entries.
package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/network"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/dnsname"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Env is what every service is given: the node's prepared state. It is
// complete before any service starts and read-only afterwards.
type Env struct {
	// Root is the placed node tree. Root.Data is ready (created, and
	// mounted on a real node); Root.Ephemeral and Root.Kubelet exist.
	Root *localstorage.Root
	// Volumes is the node's one volume engine over Root.Data, recovered
	// from any crash before the first service starts.
	Volumes *volume.Manager
	// NodeName is this node's Kubernetes node name.
	NodeName string
}

// Service is a long-running part of the node started by the root once the
// data directory is ready.
type Service struct {
	// Name is the runnable's name in the tree (a DNS label, unique).
	Name string
	// Runnable builds the service's runnable. It is called each time the
	// root starts (so again after a root restart), with that start's Env.
	Runnable func(env *Env) supervisor.Runnable
}

// DataMount is the data partition to mount at Root.Data before anything
// else, on a node that boots into plinth-node. Hosted nodes have none:
// their data directory is whatever the operator put there.
type DataMount struct {
	// Source is the block device, e.g. /dev/vdb or /dev/disk/by-label/data.
	Source string
	// FSType is the filesystem type, e.g. "xfs".
	FSType string
	// Options are the mount options, e.g. "prjquota" (needed for
	// project-quota enforcement on XFS).
	Options string
	// FormatIfBlank formats Source as XFS before mounting it if its first
	// MiB is zeros (a new machine's first boot). A device holding anything
	// is never formatted: it either mounts as FSType or the mount fails.
	FormatIfBlank bool
}

// Config configures the root runnable.
type Config struct {
	// Root is the node tree (required): its data, ephemeral and kubelet
	// trees placed.
	Root *localstorage.Root
	// NodeName is this node's name (required).
	NodeName string
	// DataMount, if set, is mounted at Root.Data before the tree is
	// created (node mode).
	DataMount *DataMount
	// AllowUnenforcedCapacity accepts filesystem volumes without enforced
	// size when the data filesystem has no project quotas (the volume
	// engine's rule: volume.Config.AllowUnenforced).
	AllowUnenforcedCapacity bool
	// NodeShare is the node share (volume.NodeShare): the directories of
	// the data filesystem the node's other writers use, given one quota
	// so that they cannot take the room volumes were promised. A booted
	// node names its kubelet's, containerd's and pod logs' directories;
	// hosted nodes do not own that layout and name none.
	NodeShare volume.NodeShare
	// ProbeQuota replaces fsquota.Probe (tests).
	ProbeQuota func(dir string) error
	// Network, if set, is configured once the data directory is ready
	// and before any service starts (a booted node; hosted nodes use the
	// host's network as it is).
	Network *network.Config
	// Services are started, in one group, once the data directory is
	// ready and the network configured.
	Services []Service
}

// dataDirName, volumesName, networkName, nodeShareName and quotaWatchName
// (quotawatch.go) are the names of the root's own runnables; services
// cannot take them.
const (
	dataDirName   = "datadir"
	volumesName   = "volumes"
	networkName   = "network"
	nodeShareName = "nodeshare"
)

func (c *Config) validate() error {
	if c.Root == nil || !c.Root.Data.Placed() || !c.Root.Ephemeral.Placed() || !c.Root.Kubelet.Placed() {
		return errors.New("node config: Root must have its data, ephemeral and kubelet trees placed")
	}
	if strings.TrimSpace(c.NodeName) == "" {
		return errors.New("node config: NodeName is empty")
	}
	if m := c.DataMount; m != nil && (m.Source == "" || m.FSType == "") {
		return fmt.Errorf("node config: data mount needs a source and a filesystem type, have %q and %q", m.Source, m.FSType)
	}
	seen := map[string]bool{dataDirName: true, volumesName: true, networkName: true, nodeShareName: true, quotaWatchName: true}
	for _, s := range c.Services {
		// The supervisor's rule for runnable names; checking it here
		// turns a typo into a start-up error instead of a root restart loop.
		if err := dnsname.CheckLabel(s.Name); err != nil {
			return fmt.Errorf("node config: service name %q is not a DNS label: %w", s.Name, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("node config: service name %q is used twice (or is reserved)", s.Name)
		}
		if s.Runnable == nil {
			return fmt.Errorf("node config: service %q has no Runnable", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// Root returns the root runnable of the node's supervision tree, after
// checking cfg. The runnable signals Healthy once the data directory and
// the volume engine are ready and every service has been started; it then
// runs until its context ends. cfg is not modified and must not be
// modified afterwards.
func Root(cfg Config) (supervisor.Runnable, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		// The ephemeral and kubelet trees are cheap to (re)create and
		// needed by services; creating them here rather than in datadir
		// keeps datadir about the data partition alone.
		if err := cfg.Root.Ephemeral.MkdirAll(); err != nil {
			return fmt.Errorf("creating ephemeral tree: %w", err)
		}
		removeStaleTemporaryFiles(log, &cfg.Root.Ephemeral)

		data, err := runStep(ctx, dataDirName, dataDirRunnable(cfg))
		if err != nil {
			return err
		}
		vols, err := runStep(ctx, volumesName, volumesRunnable(cfg, data))
		if err != nil {
			return err
		}

		if cfg.Network != nil {
			if _, err := runStep(ctx, networkName, networkRunnable(*cfg.Network)); err != nil {
				return err
			}
		}
		// The kubelet tree is created once the data partition is
		// mounted: a booted node keeps the kubelet's root on it (see
		// docs/operating.md, "A booted node"), and directories made
		// before the mount would be hidden below it.
		if err := cfg.Root.Kubelet.MkdirAll(); err != nil {
			return fmt.Errorf("creating kubelet tree: %w", err)
		}
		env := &Env{Root: cfg.Root, Volumes: vols, NodeName: cfg.NodeName}
		group := make(map[string]supervisor.Runnable, len(cfg.Services)+2)
		for _, s := range cfg.Services {
			group[s.Name] = s.Runnable(env)
		}
		if vols.ShareActive() {
			group[nodeShareName] = nodeShareRunnable(vols, nodeShareInterval, shareAuditInterval)
		}
		if vols.CapacityEnforced() {
			group[quotaWatchName] = quotaWatchRunnable(vols)
		}
		if len(group) > 0 {
			if err := supervisor.RunGroup(ctx, group); err != nil {
				return fmt.Errorf("starting services: %w", err)
			}
		}
		names := make([]string, 0, len(cfg.Services))
		for _, s := range cfg.Services {
			names = append(names, s.Name)
		}
		log.Infof("node %s is up: data directory %s, services %v", cfg.NodeName, data.Tree().FullPath(), names)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, nil
}

// dataDirRunnable mounts (node mode), creates and probes the data
// directory, and hands the result to the root. A failure (device not there
// yet, mount refused) is returned, and the supervisor retries with
// backoff: on a booting machine the data device may appear a little later
// than plinth-node starts.
func dataDirRunnable(cfg Config) step[*DataDir] {
	return func(ctx context.Context) (*DataDir, error) {
		log := supervisor.Logger(ctx)
		data := &cfg.Root.Data
		if m := cfg.DataMount; m != nil {
			mounted, err := ensureMounted(ctx, log, m, data.FullPath())
			if err != nil {
				return nil, err
			}
			if mounted {
				log.Infof("mounted data partition %s (%s, %q) at %s", m.Source, m.FSType, m.Options, data.FullPath())
			} else {
				log.Infof("data partition already mounted at %s", data.FullPath())
			}
		}
		dd, err := PrepareDataDir(data, DataDirOptions{ProbeQuota: cfg.ProbeQuota})
		if err != nil {
			return nil, err
		}
		removeStaleTemporaryFiles(log, data)
		if dd.QuotaEnforced() {
			log.Infof("data directory %s ready; project quotas enforced", data.FullPath())
		} else {
			log.Infof("data directory %s ready; project quotas not enforced: %v", data.FullPath(), dd.QuotaProbeError())
		}
		return dd, nil
	}
}

// staleTemporaryAge is how old a temporary file of an atomic write must be
// to count as left by a crash (see localstorage.RemoveStaleTemporaryFiles).
const staleTemporaryAge = time.Minute

// removeStaleTemporaryFiles clears what interrupted atomic writes left in
// n, logging each file. Failing to is only worth a warning: the files waste
// a few bytes and are never mistaken for records. The root runs it on the
// ephemeral and data trees as it prepares them.
func removeStaleTemporaryFiles(log logtree.LeveledLogger, n localstorage.Node) {
	removed, err := localstorage.RemoveStaleTemporaryFiles(n, staleTemporaryAge)
	for _, p := range removed {
		log.Infof("removed temporary file %s left by an interrupted write", p)
	}
	if err != nil {
		log.Warningf("cleaning temporary files: %v", err)
	}
}

// step is a runnable of the root's that prepares one thing (the data
// directory, the volume engine, the network) and hands it over.
type step[T any] func(ctx context.Context) (T, error)

// runStep runs r as the root's child name until it succeeds (the
// supervisor retries a failure with backoff), and returns what it made.
// The child then signals Done and ends.
func runStep[T any](ctx context.Context, name string, r step[T]) (T, error) {
	made := make(chan T, 1)
	if err := supervisor.Run(ctx, name, func(ctx context.Context) error {
		v, err := r(ctx)
		if err != nil {
			return err
		}
		select {
		case made <- v:
		default:
			// Only the first successful run is read.
		}
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}); err != nil {
		var zero T
		return zero, fmt.Errorf("starting %s: %w", name, err)
	}
	select {
	case v := <-made:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// networkRunnable configures the node's network once. A failure (the
// uplink's driver not probed yet) is retried by the supervisor.
func networkRunnable(c network.Config) step[struct{}] {
	return func(ctx context.Context) (struct{}, error) {
		if err := network.Configure(c); err != nil {
			return struct{}{}, err
		}
		supervisor.Logger(ctx).Infof("network up: %s %s via %s, node IP %s on lo", c.Uplink, c.Address, c.Gateway, c.NodeIP)
		return struct{}{}, nil
	}
}
