package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
)

// GRPCStopTimeout is how long ServeGRPC lets calls in flight finish once
// its context has ended, before it closes their connections. It is long
// enough for any call the node serves to finish its work (a mount, a loop
// device attach), and short enough that a stuck call cannot hold up the
// stop of the tree: two servers stopping one after the other (a runnable
// and its child) stay well inside the half minute plinth-node gives its
// whole tree.
const GRPCStopTimeout = 10 * time.Second

// ServeGRPC is the body of a runnable that serves a gRPC server: it serves
// srv on lis, signals Healthy once serving, and runs until ctx ends or
// serving fails. It must be called with the context of a supervised
// runnable.
//
// When ctx ends, srv is stopped by one rule for every server of the node:
// gracefully (no new calls; calls in flight finish, so a mount in progress
// is not cut off halfway) for up to GRPCStopTimeout, then forcibly (the
// connections are closed and the contexts of the calls still running are
// cancelled). A handler that ignores its context may still be running when
// ServeGRPC returns. ServeGRPC then returns ctx.Err(). If serving fails
// first, srv is stopped by the same rule and the error is returned.
//
// srv and lis are used up: a gRPC server cannot serve again once stopped,
// so a runnable builds both anew each time it runs.
func ServeGRPC(ctx context.Context, srv *grpc.Server, lis net.Listener) error {
	return serveGRPC(ctx, srv, lis, GRPCStopTimeout)
}

func serveGRPC(ctx context.Context, srv *grpc.Server, lis net.Listener, bound time.Duration) error {
	addr := lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	Signal(ctx, SignalHealthy)
	select {
	case err := <-served:
		if err == nil {
			// Serve returns nil only after a Stop, and only we stop srv.
			err = errors.New("server stopped by someone else")
		}
		stopGRPC(ctx, srv, addr, bound)
		return fmt.Errorf("serving gRPC on %s: %w", addr, err)
	case <-ctx.Done():
		stopGRPC(ctx, srv, addr, bound)
		<-served
		return ctx.Err()
	}
}

// stopGRPC stops srv gracefully, and forcibly once bound has passed.
func stopGRPC(ctx context.Context, srv *grpc.Server, addr string, bound time.Duration) {
	graceful := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(graceful)
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-graceful:
	case <-timer.C:
		Logger(ctx).Warningf("gRPC server on %s: calls still running %v after stopping began; closing their connections", addr, bound)
		srv.Stop()
	}
}
