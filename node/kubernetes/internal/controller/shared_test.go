package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
)

func TestMain(m *testing.M) { controllertest.Main(m) }

// seen counts, per name, the claims in namespace ns that an
// incarnation's handler was given: added, updated or deleted. (The
// informer sees every namespace, so also the claims an earlier run of the
// test left.)
type seen struct {
	ns    string
	mu    sync.Mutex
	names map[string]int
}

func (s *seen) add(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if m, err := meta.Accessor(obj); err == nil && m.GetNamespace() == s.ns {
		s.mu.Lock()
		s.names[m.GetName()]++
		s.mu.Unlock()
	}
}

func (s *seen) has(name string) bool { return s.of(name) > 0 }

// of is how many times the handler was given claim name.
func (s *seen) of(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// incarnation runs one incarnation of base under a supervisor, as a
// controller's Run does, with a handler on its claims in namespace ns,
// until stop.
func incarnation(t *testing.T, base controller.Base, ns string) (*seen, context.CancelFunc) {
	t.Helper()
	s := &seen{ns: ns, names: map[string]int{}}
	synced := make(chan struct{})
	stop, _ := supervisor.TestHarness(t, func(ctx context.Context) error {
		inc, err := base.Begin(ctx)
		if err != nil {
			return err
		}
		defer inc.Stop()
		if _, err := inc.Claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    s.add,
			UpdateFunc: func(_, o any) { s.add(o) },
			DeleteFunc: s.add,
		}); err != nil {
			return err
		}
		if err := inc.Sync(ctx); err != nil {
			return err
		}
		close(synced)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	})
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatal("the incarnation did not sync within 30 s")
	}
	return s, stop
}

// Two incarnations share one claim informer; one that stops no longer
// hears of claims, the other still does, and a later one is given every
// claim in the cache when it starts, as if it had listed them.
func TestSharedInformersOutliveIncarnations(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	base := withShared(t, e, e.Node)

	first, stopFirst := incarnation(t, base, e.NS)
	second, _ := incarnation(t, base, e.NS)
	e.CreateClaim(controllertest.Claim{Name: "before"})
	controllertest.Eventually(t, 30*time.Second, "both incarnations hearing of claim before", func() (bool, error) {
		return first.has("before") && second.has("before"), nil
	})

	stopFirst()
	e.CreateClaim(controllertest.Claim{Name: "after"})
	controllertest.Eventually(t, 30*time.Second, "the running incarnation hearing of claim after", func() (bool, error) {
		return second.has("after"), nil
	})
	// Give a handler that was not removed time to be called too.
	time.Sleep(time.Second)
	if first.has("after") {
		t.Error("a stopped incarnation's handler was still called")
	}

	third, _ := incarnation(t, base, e.NS)
	for _, name := range []string{"before", "after"} {
		if !third.has(name) {
			t.Errorf("a new incarnation was not given claim %s at its start", name)
		}
	}
}

// withShared is e's Base for node with shared informers, which run until
// the test ends.
func withShared(t *testing.T, e *controllertest.Env, node string) controller.Base {
	t.Helper()
	base := controller.Base{Client: e.Client, Driver: names.DriverName, NodeName: node,
		RetryBase: controllertest.RetryBase, RetryMax: controllertest.RetryMax}
	if err := base.Complete("test"); err != nil {
		t.Fatal(err)
	}
	shared, err := controller.NewShared(base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { shared.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	base.Shared = shared
	return base
}
