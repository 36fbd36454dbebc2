package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/csi"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
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
// ctx ends.
func csiServe(ctx context.Context, args []string) error {
	o, err := parseCSIServeOptions(args)
	if err != nil {
		return err
	}
	node, err := csi.ParseEndpoint(o.endpoint)
	if err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	var ctrl string
	if o.controllerEndpoint != "" {
		if ctrl, err = csi.ParseEndpoint(o.controllerEndpoint); err != nil {
			return fmt.Errorf("--controller-endpoint: %w", err)
		}
	}

	var root localstorage.Root
	for _, p := range []struct {
		place func(string) error
		dir   string
	}{{root.Data.Place, o.dataDir}, {root.Kubelet.Place, o.kubeletDir}, {root.Ephemeral.Place, o.ephemeralDir}} {
		if err := p.place(p.dir); err != nil {
			return err
		}
	}
	if err := root.Ephemeral.MkdirAll(); err != nil {
		return err
	}
	// One server per data directory: two would each think they own
	// the same publications and loop devices.
	unlock, err := lockTree(root.Ephemeral.Lock.FullPath())
	if err != nil {
		return err
	}
	defer unlock()
	if err := root.Kubelet.MkdirAll(); err != nil {
		return err
	}
	dd, err := core.PrepareDataDir(&root.Data, core.DataDirOptions{AllowUnenforcedCapacity: o.allowUnenforcedCapacity})
	if err != nil {
		return err
	}
	vols, err := volume.New(volume.Config{Data: &root.Data, QuotaError: dd.QuotaProbeError(), AllowUnenforced: o.allowUnenforcedCapacity})
	if err != nil {
		return err
	}

	lt := logtree.New(logtree.WithSink(os.Stderr))
	lt.SetVerbosity("", o.verbosity)
	ep, err := openEndpoint(o.metricsAddress)
	if err != nil {
		return err
	}
	unwatch, err := ep.Metrics().WatchVolumes(vols)
	if err != nil {
		return err
	}
	defer unwatch()
	// Built before the tree starts: a wiring mistake ends csi-serve here
	// instead of failing every restart of the runnables.
	srv, err := csi.NewServer(csi.Config{
		Volumes:    vols,
		Kubelet:    &root.Kubelet,
		State:      &root.Ephemeral.CSI,
		NodeName:   o.nodeName,
		Controller: ctrl != "",
		Metrics:    ep.Metrics(),
	})
	if err != nil {
		return err
	}
	var registrar *csi.Registrar
	if o.register {
		if registrar, err = csi.NewRegistrar(&root.Kubelet); err != nil {
			return err
		}
	}
	serve := func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		if dd.QuotaEnforced() {
			log.Infof("project quotas enforced on %s", root.Data.Volumes.FullPath())
		} else {
			log.Warningf("project quotas not enforced (%v); filesystem volumes %s", dd.QuotaProbeError(),
				map[bool]string{true: "are created WITHOUT size enforcement (--allow-unenforced-capacity)", false: "are refused"}[o.allowUnenforcedCapacity])
		}
		core.RemoveStaleTemporaryFiles(log, &root.Ephemeral)
		core.RemoveStaleTemporaryFiles(log, &root.Data)
		recs, err := vols.Recover(ctx)
		for _, r := range recs {
			if r.Err != nil {
				log.Warningf("volume %s: %s: %v", r.ID, r.Action, r.Err)
			} else {
				log.Infof("volume %s: %s", r.ID, r.Action)
			}
		}
		if err != nil {
			return err
		}
		if err := srv.Start(ctx, log); err != nil {
			return err
		}
		group := map[string]supervisor.Runnable{"node": endpointRunnable(srv, node, srv.Register)}
		if ctrl != "" {
			group["controller"] = endpointRunnable(srv, ctrl, srv.RegisterController)
		}
		if registrar != nil {
			group["registration"] = registrar.Run
		}
		if err := supervisor.RunGroup(ctx, group); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	sup := supervisor.New(ctx, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "csi", serve); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, append(ep.supervisorOptions(), supervisor.WithLogTree(lt))...)
	// The endpoint stops with the process, also when the tree ends by
	// itself (ctx still live).
	serveCtx, stopServing := context.WithCancel(ctx)
	served := ep.serve(serveCtx, sup, lt.LeveledFor("main"))
	defer func() { stopServing(); <-served }()
	<-ctx.Done()
	// The supervisor stops the tree when ctx ends; give it time to finish
	// in-flight calls (a half-done mount is never left behind).
	select {
	case <-sup.Done():
	case <-time.After(shutdownTimeout):
		return errors.New("csi-serve: shutdown timed out")
	}
	return nil
}

// endpointRunnable serves the services that register adds on a unix socket
// at path until ctx ends.
func endpointRunnable(srv *csi.Server, path string, register func(*grpc.Server)) supervisor.Runnable {
	return func(ctx context.Context) error {
		l, err := csi.Listen(path)
		if err != nil {
			return err
		}
		g := srv.NewGRPCServer()
		register(g)
		supervisor.Logger(ctx).Infof("serving on %s", path)
		err = supervisor.ServeGRPC(ctx, g, l)
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return err
	}
}
