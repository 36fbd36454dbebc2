package supervisor

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"source.plinth.dev/pkg/logtree"
)

// slowHealth answers Check once released, or when its call is cancelled;
// it tells entered when a call has arrived and cancelled when a call's
// context ended before the release.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	entered   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
}

func newSlowHealth() *slowHealth {
	return &slowHealth{entered: make(chan struct{}, 10), release: make(chan struct{}), cancelled: make(chan struct{}, 10)}
}

func (h *slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		h.cancelled <- struct{}{}
		return nil, ctx.Err()
	}
}

// grpcTree serves h on a fresh unix socket with serveGRPC as the root of
// a tree, and returns a client, the tree, the function that ends the
// tree's context, and the channel that receives what serveGRPC returned.
func grpcTree(t *testing.T, h *slowHealth, bound time.Duration, prepare func(net.Listener)) (healthpb.HealthClient, *Supervisor, context.CancelFunc, <-chan error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "grpc.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(lis)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	returned := make(chan error, 1)
	tl := &testLogWriter{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, func(ctx context.Context) error {
		err := serveGRPC(ctx, srv, lis, bound)
		select {
		case returned <- err:
		default:
		}
		if ctx.Err() == nil {
			<-ctx.Done() // no second incarnation: srv is used up
		}
		return err
	}, WithLogTree(logtree.New(logtree.WithSink(tl))))
	t.Cleanup(func() {
		cancel()
		s.Wait()
		tl.disable()
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn), s, cancel, returned
}

func rootHealthy(s *Supervisor) bool {
	st := s.Status()
	return len(st) > 0 && st[0].Healthy
}

// check calls Check in the background and returns where its result goes.
func check(c healthpb.HealthClient) <-chan error {
	res := make(chan error, 1)
	go func() {
		resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = errors.New("not SERVING")
		}
		res <- err
	}()
	return res
}

func TestServeGRPCServesAndSignalsHealthy(t *testing.T) {
	h := newSlowHealth()
	close(h.release)
	client, s, cancel, returned := grpcTree(t, h, time.Minute, nil)
	waitFor(t, "the serving runnable to signal Healthy", func() bool { return rootHealthy(s) })
	if err := recv(t, check(client), "Check"); err != nil {
		t.Fatalf("Check: %v", err)
	}
	cancel()
	if err := recv(t, returned, "serveGRPC to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("serveGRPC returned %v after its context ended, want context.Canceled", err)
	}
}

// TestServeGRPCStopsGracefully ends the context while a call is in flight:
// the call still succeeds, and serveGRPC waits for it (within the bound).
func TestServeGRPCStopsGracefully(t *testing.T) {
	h := newSlowHealth()
	client, s, cancel, returned := grpcTree(t, h, time.Minute, nil)
	waitFor(t, "the serving runnable to signal Healthy", func() bool { return rootHealthy(s) })
	res := check(client)
	recv(t, h.entered, "the call to reach the handler")
	cancel()
	select {
	case err := <-returned:
		t.Fatalf("serveGRPC returned (%v) while a call was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(h.release)
	if err := recv(t, res, "the in-flight call"); err != nil {
		t.Errorf("call in flight when stopping began: %v, want success", err)
	}
	if err := recv(t, returned, "serveGRPC to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("serveGRPC returned %v, want context.Canceled", err)
	}
	select {
	case <-h.cancelled:
		t.Error("a graceful stop cancelled the call in flight")
	default:
	}
}

// TestServeGRPCForcesStopPastBound: a call that does not finish within the
// bound is cut off (its context cancelled, its client told) and serveGRPC
// returns, logging why.
func TestServeGRPCForcesStopPastBound(t *testing.T) {
	const bound = 100 * time.Millisecond
	h := newSlowHealth()
	defer close(h.release)
	client, s, cancel, returned := grpcTree(t, h, bound, nil)
	waitFor(t, "the serving runnable to signal Healthy", func() bool { return rootHealthy(s) })
	res := check(client)
	recv(t, h.entered, "the call to reach the handler")
	lt := s.LogTree()
	start := time.Now()
	cancel()
	if err := recv(t, returned, "serveGRPC to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("serveGRPC returned %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited < bound {
		t.Errorf("serveGRPC returned %v after stopping began, before the bound of %v", waited, bound)
	}
	if err := recv(t, res, "the cut-off call"); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Errorf("call cut off by the forced stop: %v, want Unavailable or Canceled", err)
	}
	recv(t, h.cancelled, "the handler's context to be cancelled")
	if got := logLinesWith(t, lt, "root", "gRPC server on "); len(got) != 1 || !strings.Contains(got[0], "closing their connections") {
		t.Errorf("forced stop logged %q, want one line saying why", got)
	}
}

// TestServeGRPCReportsServeFailure: when serving fails (here: the listener
// is already closed), serveGRPC returns the error instead of waiting.
func TestServeGRPCReportsServeFailure(t *testing.T) {
	h := newSlowHealth()
	close(h.release)
	_, _, _, returned := grpcTree(t, h, time.Minute, func(l net.Listener) { l.Close() })
	err := recv(t, returned, "serveGRPC to return")
	if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "serving gRPC on ") {
		t.Errorf("serveGRPC over a closed listener returned %v, want the serving error", err)
	}
}
