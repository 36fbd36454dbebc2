package provisioner

// Controller tests against a real etcd + kube-apiserver +
// kube-controller-manager (the PV controller binds claims and releases
// volumes, exactly as in a cluster). One control plane serves every test of
// the package; each test has its own namespace, node name, StorageClass and
// data directory, so they do not see each other's work.

import (
	"os"
	"testing"
	"time"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/ktest"
)

func TestMain(m *testing.M) {
	if kubeconfig := os.Getenv(envInformerBaseline); kubeconfig != "" {
		runInformerBaseline(kubeconfig)
	}
	ktest.Main(controllertest.Tests(m))
}

// env is a test's world (see controllertest.Env) with the provisioner's
// own helpers.
type env struct{ *controllertest.Env }

// newEnv prepares a test's world. allowUnenforced decides whether
// filesystem volumes are accepted without quota (the host's filesystem
// enforces none).
func newEnv(t *testing.T, allowUnenforced bool) *env {
	t.Helper()
	return &env{controllertest.NewEnv(t, allowUnenforced)}
}

// controller returns the configuration of a controller for this env's node.
func (e *env) controller() *Config {
	base := controller.Base{Client: e.Client, Driver: names.DriverName, NodeName: e.Node,
		RetryBase: controllertest.RetryBase, RetryMax: controllertest.RetryMax}
	return &Config{Base: base, Volumes: e.Vols, Snapshots: e.Snapshots, OrphanGracePeriod: time.Hour}
}

// start runs a controller of cfg under a supervisor until the test ends
// (or stop is called).
func (e *env) start(cfg *Config) (stop func()) {
	e.T.Helper()
	cancel, _ := supervisor.TestHarness(e.T, e.newController(cfg).Run)
	return cancel
}

// newController builds a controller of cfg, failing the test on a wiring
// error.
func (e *env) newController(cfg *Config) *Controller {
	e.T.Helper()
	c, err := New(*cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	return c
}
