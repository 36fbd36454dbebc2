package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/kubernetes/csi"
	"source.plinth.dev/pkg/logtree"
)

const csiServeUsage = `Usage: plinth-node csi-serve --endpoint unix://PATH --data-dir DIR --kubelet-dir DIR [flags]

Serves Plinth's CSI plugin (Identity and Node) on --endpoint without
Kubernetes, for operators and tests. Volumes live in DIR/volumes of
--data-dir; target paths must lie below --kubelet-dir.

With --controller-endpoint it also serves a Controller service
(CreateVolume, DeleteVolume, ControllerExpandVolume,
ValidateVolumeCapabilities) backed by the same volume code as the cluster's
provisioner. It is a development convenience for exercising the whole CSI
lifecycle (csi-sanity, manual tests); in a cluster plinth-node's provisioner
and resizer do this work, and no controller endpoint is needed.

Flags:
`

type csiServeOptions struct {
	commonOptions
	endpoint, controllerEndpoint string
	register                     bool
}

func parseCSIServeOptions(args []string) (*csiServeOptions, error) {
	o := &csiServeOptions{}
	fs := flag.NewFlagSet("plinth-node csi-serve", flag.ContinueOnError)
	fs.StringVar(&o.endpoint, "endpoint", "", "CSI endpoint for Identity and Node, unix://PATH (required)")
	fs.StringVar(&o.controllerEndpoint, "controller-endpoint", "", "if set, also serve the development Controller service on this unix://PATH")
	o.commonOptions.declare(fs, dirDefaults{
		data:      "(required)",
		ephemeral: "(default /run/plinth/csi-serve-<hash of --data-dir>)",
		kubelet:   "(required)",
	})
	fs.BoolVar(&o.register, "register", false, "also serve the kubelet plugin registration socket in --kubelet-dir/plugins_registry")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), csiServeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, req := range []struct{ name, v string }{{"--endpoint", o.endpoint}, {"--data-dir", o.dataDir}, {"--kubelet-dir", o.kubeletDir}} {
		if req.v == "" {
			return nil, fmt.Errorf("%s is required", req.name)
		}
	}
	if err := o.completeNodeName(); err != nil {
		return nil, err
	}
	// The data directory resolved, as the kernel names mounts and loop
	// devices' files (volume.New insists); the kubelet's as given, the
	// form of the paths the kubelet sends.
	real, err := localstorage.Resolve(o.dataDir)
	if err != nil {
		return nil, err
	}
	o.dataDir = real
	if o.kubeletDir, err = filepath.Abs(o.kubeletDir); err != nil {
		return nil, err
	}
	if o.ephemeralDir == "" {
		sum := sha256.Sum256([]byte(o.dataDir))
		o.ephemeralDir = "/run/plinth/csi-serve-" + hex.EncodeToString(sum[:6])
	}
	return o, nil
}

// csiServe runs the standalone CSI plugin (`plinth-node csi-serve`) until
// ctx ends: the node's root (data directory, volume engine) with the CSI
// plugin as its one service, on the endpoints the flags name.
func csiServe(ctx context.Context, args []string) error {
	o, err := parseCSIServeOptions(args)
	if err != nil {
		return err
	}
	plugin := csi.Options{Register: o.register}
	if plugin.Endpoint, err = csi.ParseEndpoint(o.endpoint); err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	if o.controllerEndpoint != "" {
		if plugin.ControllerEndpoint, err = csi.ParseEndpoint(o.controllerEndpoint); err != nil {
			return fmt.Errorf("--controller-endpoint: %w", err)
		}
	}
	tree, err := o.tree()
	if err != nil {
		return err
	}
	if err := tree.Ephemeral.MkdirAll(); err != nil {
		return err
	}
	// One server per data directory: two would each think they own
	// the same publications and loop devices.
	unlock, err := lockTree(tree.Ephemeral.Lock.FullPath())
	if err != nil {
		return err
	}
	defer unlock()

	lt := logtree.New(logtree.WithSink(os.Stderr))
	lt.SetVerbosity("", o.verbosity)
	ep, err := openEndpoint(o.metricsAddress)
	if err != nil {
		return err
	}
	plugin.Metrics = ep.Metrics()
	svc, err := csi.NodeService(plugin, &tree.Kubelet)
	if err != nil {
		return err
	}
	cfg := o.node
	cfg.Root = tree
	cfg.Services = []core.Service{svc}
	if m := ep.Metrics(); m != nil {
		cfg.Services = append(cfg.Services, volumeMetricsService(m))
	}
	root, err := core.Root(cfg)
	if err != nil {
		return err
	}
	return supervise(ctx, root, ep, lt)
}

// tree places the three trees csi-serve uses at the directories its flags
// name; it has no root of its own.
func (o *csiServeOptions) tree() (*localstorage.Root, error) {
	var root localstorage.Root
	for _, p := range []struct {
		place func(string) error
		dir   string
	}{{root.Data.Place, o.dataDir}, {root.Kubelet.Place, o.kubeletDir}, {root.Ephemeral.Place, o.ephemeralDir}} {
		if err := p.place(p.dir); err != nil {
			return nil, err
		}
	}
	return &root, nil
}
