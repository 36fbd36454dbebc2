package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/mountinfo/mounttest"
	"source.plinth.dev/pkg/supervisor"
)

func placed(t *testing.T) (*localstorage.Root, string) {
	t.Helper()
	dir := t.TempDir()
	var r localstorage.Root
	if err := r.Place(dir); err != nil {
		t.Fatal(err)
	}
	return &r, dir
}

var errNoQuota = fmt.Errorf("test filesystem: %w", fsquota.ErrUnsupported)

func probeResult(err error) func(string) error {
	return func(string) error { return err }
}

// envService is a service that hands its Env to the test and then runs.
func envService(name string, got chan<- *Env) Service {
	return Service{Name: name, Runnable: func(env *Env) supervisor.Runnable {
		return func(ctx context.Context) error {
			got <- env
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		}
	}}
}

func waitEnv(t testing.TB, ch <-chan *Env) *Env {
	t.Helper()
	select {
	case env := <-ch:
		return env
	case <-time.After(10 * time.Second):
		t.Fatal("service not started within 10s")
		return nil
	}
}

// logs is every line logged in the tree so far.
func logs(t *testing.T, lt *logtree.LogTree) string {
	t.Helper()
	text, err := lt.Text("root")
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRootPreparesTreeAndStartsServices(t *testing.T) {
	root, dir := placed(t)
	got := make(chan *Env, 2)
	r, err := Root(Config{
		Root:       root,
		NodeName:   "node-a",
		ProbeQuota: probeResult(nil),
		Services:   []Service{envService("alpha", got), envService("beta", got)},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, r)
	var vols *volume.Manager
	for i := range 2 {
		env := waitEnv(t, got)
		if env.NodeName != "node-a" || env.Root != root {
			t.Errorf("env %+v", env)
		}
		if env.Volumes == nil || !env.Volumes.CapacityEnforced() {
			t.Errorf("quota enforced but the volume engine says otherwise: %+v", env.Volumes)
		}
		// One engine per data directory: its per-volume locks only
		// work within one Manager.
		if i == 1 && env.Volumes != vols {
			t.Error("the two services were given different volume managers")
		}
		vols = env.Volumes
	}
	// Services start only after the whole tree exists.
	for _, p := range []string{"data/volumes", "data/state/projects", "ephemeral/csi/publications", "kubelet/plugins_registry"} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", p, err)
		}
	}
	eventually(t, "the healthy log line", func() bool {
		return strings.Contains(logs(t, lt), "node node-a is up")
	})
	if l := logs(t, lt); !strings.Contains(l, "project quotas enforced") {
		t.Errorf("no quota line in logs:\n%s", l)
	}
}

func TestRootRemovesStaleTemporaryFiles(t *testing.T) {
	root, _ := placed(t)
	if err := root.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	var stale []string
	for _, d := range []string{root.Data.State.Operations.FullPath(), root.Ephemeral.CSI.Publications.FullPath()} {
		p := filepath.Join(d, ".tmp-record-123")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, p)
	}
	got := make(chan *Env, 1)
	r, err := Root(Config{Root: root, NodeName: "n", ProbeQuota: probeResult(nil), Services: []Service{envService("svc", got)}})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, r)
	waitEnv(t, got)
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived the start: %v", p, err)
		}
		if !strings.Contains(logs(t, lt), "removed temporary file "+p) {
			t.Errorf("removal of %s not logged", p)
		}
	}
}

func TestUnenforcedQuotaRefusesFilesystemVolumes(t *testing.T) {
	root, _ := placed(t)
	got := make(chan *Env, 1)
	r, err := Root(Config{Root: root, NodeName: "n", ProbeQuota: probeResult(errNoQuota), Services: []Service{envService("svc", got)}})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, r)
	env := waitEnv(t, got)
	_, err = env.Volumes.Create(context.Background(), "pvc-refused", volume.Filesystem, 1<<20)
	if !errors.Is(err, volume.ErrCapacityNotEnforced) {
		t.Fatalf("Create filesystem volume = %v, want ErrCapacityNotEnforced", err)
	}
	// The message says why and what to do.
	for _, want := range []string{"test filesystem", volume.AllowUnenforcedCapacityFlag} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if reason, allowed := env.Volumes.UnenforcedCapacity(); allowed || !errors.Is(reason, fsquota.ErrUnsupported) || env.Volumes.CapacityEnforced() {
		t.Errorf("UnenforcedCapacity = %v, %v; want the probe's error, not allowed", reason, allowed)
	}
	if l := logs(t, lt); !strings.Contains(l, "filesystem volumes will be refused") {
		t.Errorf("no refusal warning in logs:\n%s", l)
	}
}

func TestAllowUnenforcedCapacityWarnsLoudly(t *testing.T) {
	root, _ := placed(t)
	got := make(chan *Env, 1)
	r, err := Root(Config{Root: root, NodeName: "n", AllowUnenforcedCapacity: true, ProbeQuota: probeResult(errNoQuota), Services: []Service{envService("svc", got)}})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, r)
	env := waitEnv(t, got)
	if reason, allowed := env.Volumes.UnenforcedCapacity(); !allowed || reason == nil {
		t.Errorf("UnenforcedCapacity = %v, %v; want the probe's error, allowed", reason, allowed)
	}
	rd, err := lt.Read("root", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll), logtree.OnlyAtLeast(logtree.WARNING))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var warn strings.Builder
	for _, e := range rd.Backlog {
		warn.WriteString(e.Message + "\n")
	}
	if !strings.Contains(warn.String(), "NOT ENFORCED") || !strings.Contains(warn.String(), "test filesystem") {
		t.Errorf("no loud warning with the reason:\n%s", warn.String())
	}
}

func TestProbeFailureIsNotEnforcement(t *testing.T) {
	root, _ := placed(t)
	odd := errors.New("quotactl: EIO")
	dd, err := PrepareDataDir(&root.Data, DataDirOptions{ProbeQuota: probeResult(odd)})
	if err != nil {
		t.Fatal(err)
	}
	if dd.QuotaEnforced() || !errors.Is(dd.QuotaProbeError(), odd) {
		t.Error("a failed probe was taken as enforcement")
	}
}

// TestRootRecoversVolumesBeforeServices: what a crash interrupted is
// settled before any service can look at the volumes directory.
func TestRootRecoversVolumesBeforeServices(t *testing.T) {
	root, _ := placed(t)
	if err := root.Data.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	// A create of a block volume that crashed right after its intent
	// record was written: nothing else of it exists.
	ops := root.Data.State.Operations.FullPath()
	if err := os.WriteFile(filepath.Join(ops, "pvc-crashed"), []byte(`{"op":"create","mode":"block","bytes":1048576}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Env, 1)
	r, err := Root(Config{Root: root, NodeName: "n", ProbeQuota: probeResult(nil), Services: []Service{envService("svc", got)}})
	if err != nil {
		t.Fatal(err)
	}
	_, lt := supervisor.TestHarness(t, r)
	waitEnv(t, got)
	if left, err := os.ReadDir(ops); err != nil || len(left) != 0 {
		t.Errorf("intent records when the service started: %v, %v", left, err)
	}
	if l := logs(t, lt); !strings.Contains(l, "recovered volume pvc-crashed") {
		t.Errorf("recovery not logged:\n%s", l)
	}
}

func TestPrepareDataDirProbesVolumesDirectory(t *testing.T) {
	var data localstorage.DataDirectory
	if err := data.Place(filepath.Join(t.TempDir(), "standalone")); err != nil {
		t.Fatal(err)
	}
	var probed string
	if _, err := PrepareDataDir(&data, DataDirOptions{ProbeQuota: func(d string) error { probed = d; return nil }}); err != nil {
		t.Fatal(err)
	}
	if probed != data.Volumes.FullPath() {
		t.Errorf("probed %q, want the volumes directory %q", probed, data.Volumes.FullPath())
	}
	var unplaced localstorage.DataDirectory
	if _, err := PrepareDataDir(&unplaced, DataDirOptions{}); err == nil {
		t.Error("unplaced data directory accepted")
	}
}

func TestConfigValidation(t *testing.T) {
	root, _ := placed(t)
	ok := func(*Env) supervisor.Runnable { return func(context.Context) error { return nil } }
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no root", Config{NodeName: "n"}, "trees placed"},
		{"unplaced root", Config{Root: &localstorage.Root{}, NodeName: "n"}, "trees placed"},
		{"no node name", Config{Root: root, NodeName: " "}, "NodeName"},
		{"bad service name", Config{Root: root, NodeName: "n", Services: []Service{{Name: "Kube_rnetes", Runnable: ok}}}, "DNS label"},
		{"duplicate service", Config{Root: root, NodeName: "n", Services: []Service{{Name: "a", Runnable: ok}, {Name: "a", Runnable: ok}}}, "used twice"},
		{"reserved name", Config{Root: root, NodeName: "n", Services: []Service{{Name: "datadir", Runnable: ok}}}, "reserved"},
		{"reserved name volumes", Config{Root: root, NodeName: "n", Services: []Service{{Name: "volumes", Runnable: ok}}}, "reserved"},
		{"nil runnable", Config{Root: root, NodeName: "n", Services: []Service{{Name: "a"}}}, "no Runnable"},
		{"half a mount", Config{Root: root, NodeName: "n", DataMount: &DataMount{Source: "/dev/x"}}, "filesystem type"},
	} {
		if _, err := Root(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestDataMount mounts a real filesystem (tmpfs standing in for the data
// partition) the way a booted node does, and checks that a second start
// does not stack a second mount on it.
func TestDataMount(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("mounting needs root")
	}
	root, _ := placed(t)
	target := root.Data.FullPath()
	t.Cleanup(func() {
		for {
			if err := unix.Unmount(target, 0); err != nil {
				return
			}
		}
	})
	m := &DataMount{Source: "plinth-test-data", FSType: "tmpfs", Options: "size=16m,mode=0755"}
	for i, wantMounted := range []bool{true, false} {
		got := make(chan *Env, 1)
		r, err := Root(Config{Root: root, NodeName: "n", DataMount: m, ProbeQuota: probeResult(nil), Services: []Service{envService("svc", got)}})
		if err != nil {
			t.Fatal(err)
		}
		stop, lt := supervisor.TestHarness(t, r)
		waitEnv(t, got)
		var st unix.Statfs_t
		if err := unix.Statfs(root.Data.Volumes.FullPath(), &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			t.Errorf("start %d: volumes not on the mounted filesystem (type %#x, %v)", i, st.Type, err)
		}
		l := logs(t, lt)
		if strings.Contains(l, "mounted data partition plinth-test-data") != wantMounted {
			t.Errorf("start %d: mounted=%v expected; logs:\n%s", i, wantMounted, l)
		}
		stop()
	}
	if n := mounttest.Count(t, target); n != 1 {
		t.Errorf("%d mounts at %s after two starts, want 1", n, target)
	}
}

func TestIsMountPoint(t *testing.T) {
	for p, want := range map[string]bool{"/": true, "/proc": true, t.TempDir(): false, "/does/not/exist": false} {
		got, err := IsMountPoint(p)
		if err != nil || got != want {
			t.Errorf("IsMountPoint(%q) = %v, %v; want %v", p, got, err, want)
		}
	}
}
