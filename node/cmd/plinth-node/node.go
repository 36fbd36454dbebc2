package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// shutdownTimeout bounds how long a stopping node waits for its runnables.
// A runnable that ignores cancellation for longer is a bug; the supervisor
// names it in the log, and we exit with an error rather than hang a
// shutdown or a test.
const shutdownTimeout = 30 * time.Second

// runNode runs the node tree described by o until ctx ends, logging to out.
func runNode(ctx context.Context, o *options, out io.Writer) error {
	lt := logtree.New(logtree.WithSink(out))
	// "" is the top of the log tree: the verbosity applies everywhere
	// unless a subtree sets its own.
	lt.SetVerbosity("", o.verbosity)
	log := lt.LeveledFor("main")

	tree, err := o.tree()
	if err != nil {
		return err
	}
	// The lock lives in the ephemeral tree, which therefore has to exist
	// before anything else; the root creates the rest.
	if err := tree.Ephemeral.MkdirAll(); err != nil {
		return fmt.Errorf("creating ephemeral tree: %w", err)
	}
	unlock, err := lockTree(tree.Ephemeral.Lock.FullPath())
	if err != nil {
		return err
	}
	defer unlock()
	if err := tree.Ephemeral.PID.WriteAtomic([]byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording PID: %w", err)
	}
	defer tree.Ephemeral.PID.Remove()

	cfg := o.node
	cfg.Root = tree
	cfg.DataMount = o.dataMount()
	var booted *bootedNode
	if o.configDevice != "" {
		if booted, err = loadBootedNode(ctx, log, o, tree); err != nil {
			return err
		}
		booted.apply(&cfg)
	}
	ep, err := openEndpoint(o.metricsAddress)
	if err != nil {
		return err
	}
	if cfg.Services, err = services(o, tree, booted, ep.Metrics()); err != nil {
		return err
	}
	root, err := core.Root(cfg)
	if err != nil {
		return err
	}
	log.Infof("plinth-node starting: node %s, root %s, data %s, ephemeral %s, kubelet %s",
		cfg.NodeName, tree.FullPath(), tree.Data.FullPath(), tree.Ephemeral.FullPath(), tree.Kubelet.FullPath())
	return supervise(ctx, root, ep, lt)
}

// supervise runs root as the root of a supervision tree logging to lt,
// serves the metrics endpoint ep (if any) on it, and stops the tree when
// ctx ends, waiting at most shutdownTimeout for its runnables. plinth-node
// and csi-serve both end here.
func supervise(ctx context.Context, root supervisor.Runnable, ep *endpoint, lt *logtree.LogTree) error {
	log := lt.LeveledFor("main")
	s := supervisor.New(ctx, root, append(ep.supervisorOptions(), supervisor.WithLogTree(lt))...)
	// The endpoint stops with the process, also when the tree ends by
	// itself (ctx still live).
	serveCtx, stopServing := context.WithCancel(ctx)
	served := ep.serve(serveCtx, s, log)
	defer func() { stopServing(); <-served }()
	select {
	case <-s.Done():
		// Only a root that signalled Done ends the tree on its own; ours
		// never does, so this is a bug worth an error exit.
		return errors.New("supervision tree stopped by itself")
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// The supervisor stops the tree when ctx ends; give it time to finish
	// in-flight calls (a half-done mount is never left behind).
	select {
	case <-s.Done():
		log.Info("stopped cleanly")
		return nil
	case <-time.After(shutdownTimeout):
		return fmt.Errorf("runnables still running %s after shutdown began: %v", shutdownTimeout, s.Status())
	}
}

// lockTree takes an exclusive flock on path, so that two plinth-nodes never
// manage one tree. The kernel drops the lock when the process dies, so a
// crash never leaves a stale lock behind.
func lockTree(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another plinth-node is running on this tree (it holds %s)", path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
