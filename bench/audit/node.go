package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/nodevm"
)

// world is the control plane on this host and the VM node joined to it.
type world struct {
	cp   *launch.ControlPlane
	node *nodevm.Node
	// booted is when the node was Ready: the audit's first round runs as
	// plinth-node starts, and its rounds tick every interval from there.
	booted time.Time
}

// dataSize is the VM node's data disk (sparse): the big volume's inodes
// (512 bytes each) and directories, with room to spare.
const dataSize = 8 << 30

// startWorld starts the control plane and boots the node with the audit
// interval of o and its metrics endpoint forwarded to this host. done
// stops both and removes the work directory after a success.
func startWorld(ctx context.Context, o options) (_ *world, done func(error) error, err error) {
	tmp, keep, err := cluster.WorkDir("audit", "audit-", o.out)
	if err != nil {
		return nil, nil, err
	}
	w := &world{}
	done = func(err error) error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Minute)
		defer cancel()
		if w.node != nil {
			err = errors.Join(err, w.node.Close(cctx))
		}
		if w.cp != nil {
			err = errors.Join(err, w.cp.Stop(cctx))
		}
		keep(err)
		return err
	}
	defer func() {
		if err != nil {
			err = done(err)
		}
	}()
	image, kernel, err := nodeImage(ctx, tmp)
	if err != nil {
		return nil, nil, err
	}
	w.cp, err = launch.StartControlPlane(ctx, launch.ControlPlaneConfig{
		Dir: filepath.Join(tmp, "cp"), Scheduler: true, StorageObjects: true, SnapshotAPI: true,
	})
	if err != nil {
		return nil, nil, err
	}
	w.node, err = nodevm.New(nodevm.Config{
		Dir: filepath.Join(tmp, "node"), Kernel: kernel, Image: image, ControlPlane: w.cp,
		DataSize:    dataSize,
		KernelArgs:  []string{"--", "--volume-audit-interval=" + o.interval.String()},
		MetricsPort: nodevm.MetricsPort,
	})
	if err != nil {
		return nil, nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := w.node.Boot(bctx); err != nil {
		return nil, nil, err
	}
	if err := w.node.WaitReady(bctx); err != nil {
		return nil, nil, err
	}
	w.booted = time.Now()
	fmt.Printf("audit: node Ready with storage in %.1f s\n", w.booted.Sub(start).Seconds())
	return w, done, nil
}

// nodeImage returns the node image's test variant with fio's image added
// (the fio of this host, as bench/datapath's pods run it), and its
// kernel, built by the script `make test-e2e-vm` uses, or found in its
// cache.
func nodeImage(ctx context.Context, tmp string) (image, kernel string, err error) {
	fio, err := images.Fio(ctx, images.DefaultFio)
	if err != nil {
		return "", "", err
	}
	archive := filepath.Join(tmp, "fio.tar")
	if err := fio.WriteFile(archive); err != nil {
		return "", "", fmt.Errorf("writing the fio image: %w", err)
	}
	return nodevm.TestImage(ctx, archive)
}
