package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"source.plinth.dev/test/launch/host"
)

// Shared gives all tests of one test binary a single cluster: it starts on
// the first Cluster call (so a package whose cluster tests are all skipped
// pays nothing) and stops when the tests are done. Use it from TestMain:
//
//	var cluster = launch.NewShared(launch.Config{})
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		c := cluster.Cluster(t)
//		c.Client.CoreV1()...
//	}
//
// Tests sharing a cluster must not depend on each other's objects; give
// each test its own namespace or object names.
type Shared struct {
	cfg Config

	mu      sync.Mutex
	cluster *Cluster
	err     error
	before  host.Snapshot
}

// NewShared prepares a shared cluster. cfg.Dir defaults to a new directory
// under /tmp; cfg.WaitForLock is forced on, so test binaries that each want
// a cluster take turns instead of failing.
func NewShared(cfg Config) *Shared {
	cfg.WaitForLock = true
	return &Shared{cfg: cfg}
}

// Run runs the tests, stops the cluster, and fails the binary if the
// teardown left processes, mounts or loop devices behind. On success the
// work directory is removed; on failure it stays, logs included.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	s.mu.Lock()
	c := s.cluster
	s.mu.Unlock()
	if c == nil {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cluster teardown: %v\n", err)
		code = 1
	}
	if diff := s.before.Diff(host.TakeSnapshot(c.Dir)); diff != "" {
		fmt.Fprintf(os.Stderr, "FAIL: the cluster left state on the host:\n%s\n", diff)
		code = 1
	}
	if code == 0 {
		_ = os.RemoveAll(c.Dir)
	} else {
		fmt.Fprintf(os.Stderr, "cluster logs kept in %s\n", c.LogDir)
	}
	return code
}

// Cluster returns the running shared cluster, starting it if needed. It
// skips the test when not running as root, except under CI=true, where a
// test that cannot run must fail instead.
func (s *Shared) Cluster(t testing.TB) *Cluster {
	t.Helper()
	RequireRoot(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil && s.err == nil {
		cfg := s.cfg
		if cfg.Dir == "" {
			dir, err := os.MkdirTemp("/tmp", "plinth-test-")
			if err != nil {
				t.Fatalf("creating cluster work directory: %v", err)
			}
			cfg.Dir = dir
		}
		if cfg.Log == nil {
			cfg.Log = io.Discard
			if testing.Verbose() {
				cfg.Log = os.Stderr
			}
		}
		s.before = host.TakeSnapshot(cfg.Dir)
		// Generous: a cold Kubernetes build alone takes about 10 minutes.
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
		defer cancel()
		s.cluster, s.err = Start(ctx, cfg)
	}
	if s.err != nil {
		t.Fatalf("starting the test cluster: %v", s.err)
	}
	select {
	case <-s.cluster.Failed():
		t.Fatalf("the test cluster failed earlier: %v", s.cluster.Err())
	default:
	}
	return s.cluster
}

// RequireRoot skips t unless running as root; under CI=true it fails
// instead, since CI runs as root and must never silently skip.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root, and CI must run it")
	}
	t.Skip("needs root (kubelet, containerd, mounts)")
}
