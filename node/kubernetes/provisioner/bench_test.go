package provisioner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/snapshotapi"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
)

// Client budget of both sides of BenchmarkProvision500: plinth-node's
// defaults (node/kubernetes.DefaultQPS/DefaultBurst).
const (
	benchQPS   = 100
	benchBurst = 200
	benchCount = 500
)

func clientWith(tb testing.TB, qps float32, burst int) kubernetes.Interface {
	tb.Helper()
	cfg := rest.CopyConfig(controllertest.ControlPlane(tb).RESTConfig)
	cfg.QPS, cfg.Burst = qps, burst
	// As plinth-node's client (node/kubernetes.Options.RESTConfig).
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkProvision500 measures how fast 500 filesystem claims become
// Bound with the provisioner (the controller creates the volumes and PVs,
// kube-controller-manager's PV controller binds them) against the bare
// limit: no controller, a client with the same QPS and burst and as many
// workers creates the 500 PVs for the same kind of claims, and the same PV
// controller binds them. Each op runs both, back to back (alternating which
// goes first), so a machine whose load changes affects both alike.
//
// Metrics: PVCs-Bound/s and bare-PVCs-Bound/s, and ratio-Bound between them
// (goal: >= 0.7); PVs-created/s, bare-PVs-created/s and ratio-created
// isolate the creation half from the binding, which is the PV controller's
// single claim worker in kube-controller-manager in both cases.
func BenchmarkProvision500(b *testing.B) {
	var total = map[string]struct{ created, bound time.Duration }{}
	for i := range b.N {
		order := []string{"bare", "provisioner"}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, impl := range order {
			created, bound := provisionBatch(b, impl, i)
			t := total[impl]
			t.created += created
			t.bound += bound
			total[impl] = t
		}
	}
	n := float64(b.N * benchCount)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	prov, bare := total["provisioner"], total["bare"]
	b.ReportMetric(rate(prov.bound), "PVCs-Bound/s")
	b.ReportMetric(rate(bare.bound), "bare-PVCs-Bound/s")
	b.ReportMetric(bare.bound.Seconds()/prov.bound.Seconds(), "ratio-Bound")
	b.ReportMetric(rate(prov.created), "PVs-created/s")
	b.ReportMetric(rate(bare.created), "bare-PVs-created/s")
	b.ReportMetric(bare.created.Seconds()/prov.created.Seconds(), "ratio-created")
}

// provisionBatch runs one batch of 500 claims with impl ("bare" or
// "provisioner") and returns when all PVs existed and all claims were Bound,
// counted from the moment the PV-creating side started.
func provisionBatch(b *testing.B, impl string, i int) (created, bound time.Duration) {
	b.StopTimer()
	defer b.StartTimer()
	e := benchEnv(b, i)
	fast := clientWith(b, 2000, 2000)
	ctx := context.Background()
	claims := make([]*corev1.PersistentVolumeClaim, benchCount)
	var creates errgroup.Group
	creates.SetLimit(32)
	for i := range benchCount {
		creates.Go(func() error {
			var err error
			claims[i], err = fast.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, e.ClaimObject(controllertest.Claim{Name: fmt.Sprintf("c%04d", i)}), metav1.CreateOptions{})
			return err
		})
	}
	if err := creates.Wait(); err != nil {
		b.Fatal(err)
	}
	client := clientWith(b, benchQPS, benchBurst)
	defer cleanupBatch(b, fast, e)
	b.StartTimer()
	start := time.Now()
	if impl == "bare" {
		class := testClass()
		class.Name = e.Class
		go func() {
			var pvs errgroup.Group
			pvs.SetLimit(DefaultClaimWorkers)
			for i := range benchCount {
				pvs.Go(func() error {
					req, err := validateClaim(claims[i], class, names.DriverName)
					if err != nil {
						return err
					}
					_, err = client.CoreV1().PersistentVolumes().Create(ctx, buildPV(claims[i], req, names.DriverName, e.Node, e.Node), metav1.CreateOptions{})
					if err != nil {
						b.Error(err)
					}
					return err
				})
			}
			_ = pvs.Wait()
		}()
	} else {
		c, err := New(Config{
			Base: controller.Base{
				Client:      client,
				EventClient: clientWith(b, 20, 50),
				Driver:      names.DriverName,
				NodeName:    e.Node,
			},
			Volumes:           e.Vols,
			Snapshots:         e.Snapshots,
			OrphanGracePeriod: time.Hour,
		})
		if err != nil {
			b.Fatal(err)
		}
		stop, _ := supervisor.TestHarness(b, c.Run)
		defer stop()
	}
	created, bound = waitBatch(b, fast, e, start)
	b.StopTimer()
	return created, bound
}

// waitBatch watches until all benchmark PVs exist and all claims are Bound
// (a watch, not polling: the measurement must not load the API server); it
// returns how long after start each happened.
func waitBatch(b *testing.B, c kubernetes.Interface, e *env, start time.Time) (created, bound time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pvs := map[string]bool{}
	claims := map[string]bool{}
	pvw, err := c.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{LabelSelector: labels.Set{ownership.LabelNode: ownership.NodeLabelValue(e.Node)}.String()})
	if err != nil {
		b.Fatal(err)
	}
	defer pvw.Stop()
	cw, err := c.CoreV1().PersistentVolumeClaims(e.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer cw.Stop()
	for {
		select {
		case ev, ok := <-pvw.ResultChan():
			if !ok {
				b.Fatalf("PV watch ended after %d PVs", len(pvs))
			}
			if pv, isPV := ev.Object.(*corev1.PersistentVolume); isPV {
				pvs[pv.Name] = true
				if len(pvs) == benchCount && created == 0 {
					created = time.Since(start)
				}
			}
		case ev, ok := <-cw.ResultChan():
			if !ok {
				b.Fatalf("claim watch ended with %d of %d claims Bound", len(claims), benchCount)
			}
			if pvc, isPVC := ev.Object.(*corev1.PersistentVolumeClaim); isPVC && pvc.Status.Phase == corev1.ClaimBound {
				claims[pvc.Name] = true
				if len(claims) == benchCount {
					return created, time.Since(start)
				}
			}
		}
	}
}

// benchEnv is newEnv for benchmarks: a namespace, class, node and data dir.
func benchEnv(b *testing.B, i int) *env {
	b.Helper()
	cp := controllertest.ControlPlane(b)
	suffix := fmt.Sprintf("%d-%d", i, time.Now().UnixNano())
	// The provisioner reads the snapshots a claim restores from, so it
	// needs their API's client even where no claim has a data source.
	snapshots, err := snapshotapi.NewClient(cp.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	e := &env{&controllertest.Env{T: b, Client: cp.Client, Snapshots: snapshots, NS: "bench-" + suffix, Class: "bench-" + suffix, Node: "bench-" + suffix}}
	ctx := context.Background()
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.NS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	sc := testClass()
	sc.Name = e.Class
	sc.Provisioner = names.DriverName
	if _, err := e.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Client.StorageV1().StorageClasses().Delete(ctx, sc.Name, metav1.DeleteOptions{}) })
	e.Dir = b.TempDir()
	e.Vols = controllertest.NewVolumes(b, e.Dir, true)
	return e
}

// cleanupBatch deletes a batch's claims and PVs and waits until they are
// gone, so the API server and the controller manager are idle again before
// the next measurement starts.
func cleanupBatch(b *testing.B, c kubernetes.Interface, e *env) {
	ctx := context.Background()
	_ = c.CoreV1().Namespaces().Delete(ctx, e.NS, metav1.DeleteOptions{})
	cleanupPVs(b, e.Node)
	sel := metav1.ListOptions{LabelSelector: labels.Set{ownership.LabelNode: ownership.NodeLabelValue(e.Node)}.String()}
	controllertest.Eventually(b, 3*time.Minute, "benchmark objects deleted", func() (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, e.NS, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		pvs, err := c.CoreV1().PersistentVolumes().List(ctx, sel)
		return err == nil && len(pvs.Items) == 0, err
	})
}

func cleanupPVs(tb testing.TB, node string) {
	tb.Helper()
	err := controllertest.ControlPlane(tb).Client.CoreV1().PersistentVolumes().DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: labels.Set{ownership.LabelNode: ownership.NodeLabelValue(node)}.String()})
	if err != nil {
		tb.Errorf("deleting benchmark PVs: %v", err)
	}
}

// rss returns the resident set size of process pid in bytes.
func rss(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// settledRSS waits until plinth-node's RSS stops moving (the runtime has
// digested the last burst of events and returned what it freed) and
// returns it.
func settledRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	prev := rss(tb, pid)
	for range 30 {
		time.Sleep(2 * time.Second)
		cur := rss(tb, pid)
		if d := cur - prev; d < 256<<10 && d > -(256<<10) {
			return cur
		}
		prev = cur
	}
	return prev
}

// BenchmarkForeignClaimsRSS measures how plinth-node's resident memory
// depends on the PVCs in the cluster that are not its own (issue 35: flat,
// within 10%, from none to 100,000), both when they arrive while it runs
// (watch) and when it starts with them present (initial list). The node
// selects its claims by label on the API server, so the claims of another
// node should never reach it. One op is the whole measurement: settled
// RSS with none, 10,000 and 100,000 foreign claims, then after a restart
// (make bench runs one); the figures are the custom metrics.
//
// The baseline, measured on the same claims at the same time, is a process
// holding an ordinary client-go shared informer on every PVC (full
// objects, no transform): what a controller that watches every claim, as
// plinth-node once did, costs when written the usual way.
func BenchmarkForeignClaimsRSS(b *testing.B) {
	stages := []int{10000, 100000}
	foreign := stages[len(stages)-1]
	var plinth, informer rssFigures
	for range b.N {
		b.StopTimer()
		e := benchEnv(b, 0)
		node, base := foreignRSSProcesses(b, e)
		b.StartTimer()

		start := func() {
			for _, p := range []*controllertest.NodeProcess{node, base} {
				if err := p.StartErr(); err != nil {
					b.Fatal(err)
				}
			}
			// Both caches hold every claim before their RSS is read.
			waitLog(b, base, informerSynced)
		}
		start()
		plinth.empty, informer.empty = settledRSS(b, node.Pid()), settledRSS(b, base.Pid())

		fast := clientWith(b, 3000, 3000)
		made := 0
		plinth.stages, informer.stages = nil, nil
		for _, n := range stages {
			createForeign(b, fast, e, made, n)
			made = n
			plinth.stages, informer.stages = append(plinth.stages, settledRSS(b, node.Pid())), append(informer.stages, settledRSS(b, base.Pid()))
		}
		plinth.watched, informer.watched = plinth.stages[len(stages)-1], informer.stages[len(stages)-1]
		node.Kill(syscall.SIGTERM)
		base.Kill(syscall.SIGTERM)
		start()
		plinth.restarted, informer.restarted = settledRSS(b, node.Pid()), settledRSS(b, base.Pid())
		node.Kill(syscall.SIGTERM)
		base.Kill(syscall.SIGTERM)

		// The namespace goes, unwaited: its claims have no PVs, and
		// deleting 100,000 of them takes the control plane longer than
		// the whole measurement.
		b.StopTimer()
		_ = fast.CoreV1().Namespaces().Delete(context.Background(), e.NS, metav1.DeleteOptions{})
		b.StartTimer()
	}
	perClaim := func(grown int64) float64 { return float64(grown) / float64(foreign) }
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	b.ReportMetric(mib(plinth.empty), "MiB-rss-empty")
	for i, n := range stages {
		b.ReportMetric(mib(plinth.stages[i]), fmt.Sprintf("MiB-rss-%dk", n/1000))
		b.ReportMetric(mib(informer.stages[i]), fmt.Sprintf("informer-MiB-rss-%dk", n/1000))
	}
	b.ReportMetric(mib(plinth.restarted), fmt.Sprintf("MiB-rss-restarted-%dk", foreign/1000))
	// The goal: at most 1.10, watched and restarted.
	b.ReportMetric(float64(plinth.watched)/float64(plinth.empty), "ratio-rss-watched-to-empty")
	b.ReportMetric(float64(plinth.restarted)/float64(plinth.empty), "ratio-rss-restarted-to-empty")
	b.ReportMetric(perClaim(plinth.watched-plinth.empty), "B/foreign-pvc-watched")
	b.ReportMetric(perClaim(plinth.restarted-plinth.empty), "B/foreign-pvc-restarted")
	b.ReportMetric(perClaim(informer.watched-informer.empty), "informer-B/pvc-watched")
	b.ReportMetric(perClaim(informer.restarted-informer.empty), "informer-B/pvc-restarted")
}

// foreignRSSProcesses makes (does not start) BenchmarkForeignClaimsRSS's
// two processes: plinth-node for the env's node, and the informer
// baseline (this test binary, see TestMain).
func foreignRSSProcesses(b *testing.B, e *env) (node, base *controllertest.NodeProcess) {
	bin, err := controllertest.PlinthNodeBinary()
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig, err := controllertest.ControlPlane(b).NodeAgentKubeconfig(e.Node)
	if err != nil {
		b.Fatal(err)
	}
	node = &controllertest.NodeProcess{Bin: bin, Log: filepath.Join(b.TempDir(), "plinth-node.log"), Args: []string{
		"--root=" + filepath.Join(b.TempDir(), "node"),
		"--data-dir=" + e.Dir,
		"--node-name=" + e.Node,
		"--kubeconfig=" + kubeconfig,
		"--allow-unenforced-capacity",
	}}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	base = &controllertest.NodeProcess{Bin: self, Log: filepath.Join(b.TempDir(), "informer.log"),
		Env: []string{envInformerBaseline + "=" + kubeconfig}}
	return node, base
}

// createForeign creates the claims numbered from to to-1, placed on
// another node, in the env's namespace.
func createForeign(b *testing.B, fast kubernetes.Interface, e *env, from, to int) {
	ctx := context.Background()
	var creates errgroup.Group
	creates.SetLimit(32)
	for i := from; i < to; i++ {
		creates.Go(func() error {
			c := e.ClaimObject(controllertest.Claim{Name: fmt.Sprintf("f%06d", i), Node: "some-other-node"})
			c.Labels = map[string]string{"app": "database", "tier": "backend"}
			_, err := fast.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, c, metav1.CreateOptions{})
			return err
		})
	}
	if err := creates.Wait(); err != nil {
		b.Fatal(err)
	}
}

// rssFigures are one process's settled RSS in BenchmarkForeignClaimsRSS:
// with no claims, after each stage of claims was created while it
// watched (watched: the last), and after a restart with the claims
// present. (With b.N > 1 the last op's.)
type rssFigures struct {
	empty, watched, restarted int64
	stages                    []int64
}

// When envInformerBaseline is set, this test binary is the baseline of
// BenchmarkForeignClaimsRSS instead (see TestMain): it runs a plain
// shared informer on every PVC with the kubeconfig the variable names,
// prints informerSynced when its cache holds them all, and runs until
// killed.
const (
	envInformerBaseline = "PLINTH_BENCH_INFORMER_KUBECONFIG"
	informerSynced      = "informer synced"
)

func runInformerBaseline(kubeconfig string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The wire format plinth-node uses (node/kubernetes.Options.RESTConfig),
	// so both decode the same bytes.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	ctx := context.Background()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), claims.HasSynced) {
		os.Exit(1)
	}
	fmt.Println(informerSynced)
	select {}
}

// waitLog waits until p's log has a line containing want.
func waitLog(tb testing.TB, p *controllertest.NodeProcess, want string) {
	tb.Helper()
	controllertest.Eventually(tb, 2*time.Minute, fmt.Sprintf("%q in %s", want, p.Log), func() (bool, error) {
		b, err := os.ReadFile(p.Log)
		return strings.Contains(string(b), want), err
	})
}
