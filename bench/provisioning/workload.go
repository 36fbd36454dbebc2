package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/bench/localpath"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// namespace holds every claim and pod the benchmark makes.
const namespace = "bench-provisioning"

// A series is one implementation: a StorageClass, or none (emptyDir).
type series struct {
	name  string
	class string // "" for emptyDir
	// letter starts the series' object names, so that one measurement
	// never counts another's objects.
	letter string
}

// stages a series goes through, for its trace summary.
func (s series) stages() []stage {
	if s.class == "" {
		return []stage{created, scheduled, running}
	}
	return []stage{created, selected, annotated, pvCreated, bound, scheduled, running}
}

// watcher feeds what the cluster's watches report into the current
// measurement's trace.
type watcher struct {
	cur atomic.Pointer[trace]
}

// start runs informers on the benchmark's pods and claims and on all PVs.
func (w *watcher) start(ctx context.Context, cs kubernetes.Interface) error {
	nsf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace))
	all := informers.NewSharedInformerFactory(cs, 0)
	pods := nsf.Core().V1().Pods().Informer()
	claims := nsf.Core().V1().PersistentVolumeClaims().Informer()
	pvs := all.Core().V1().PersistentVolumes().Informer()
	on := func(f func(t *trace, obj any)) func(any) {
		return func(obj any) {
			if t := w.cur.Load(); t != nil {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				f(t, obj)
			}
		}
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{pods, cache.ResourceEventHandlerFuncs{
			AddFunc:    on(func(t *trace, o any) { t.observePod(o.(*corev1.Pod)) }),
			UpdateFunc: func(_, o any) { on(func(t *trace, o any) { t.observePod(o.(*corev1.Pod)) })(o) },
			DeleteFunc: on(func(t *trace, o any) { t.mark(o.(*corev1.Pod).Name, podGone) }),
		}},
		{claims, cache.ResourceEventHandlerFuncs{
			AddFunc:    on(func(t *trace, o any) { t.observeClaim(o.(*corev1.PersistentVolumeClaim)) }),
			UpdateFunc: func(_, o any) { on(func(t *trace, o any) { t.observeClaim(o.(*corev1.PersistentVolumeClaim)) })(o) },
		}},
		{pvs, cache.ResourceEventHandlerFuncs{
			AddFunc:    on(func(t *trace, o any) { t.observePV(o.(*corev1.PersistentVolume), namespace) }),
			DeleteFunc: on(func(t *trace, o any) { t.observePVGone(o.(*corev1.PersistentVolume), namespace) }),
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("watching: %w", err)
		}
	}
	nsf.Start(ctx.Done())
	all.Start(ctx.Done())
	for _, h := range handlers {
		if !cache.WaitForCacheSync(ctx.Done(), h.inf.HasSynced) {
			return fmt.Errorf("watching: caches did not sync: %w", ctx.Err())
		}
	}
	return nil
}

// measurement is one run of one series at one N.
type measurement struct {
	running  time.Duration // create to all pods Running
	deletion time.Duration // delete to all PVs (or, for emptyDir, pods) gone
	trace    *trace
	// events counts the Events about this run's objects by source and
	// reason (occurrences, Event.count summed) up to all pods Running:
	// the PV controller sends its Events with its own client, whose rate
	// limit its binding writes share.
	events string
	// kubelet is what the node's kubelet did from the first create to
	// all pods Running, by its own metrics.
	kubelet kubeletWork
	// calls are the API requests answered from the first create to all
	// pods Running, by component (-audit only).
	calls apiCalls
	// cpu is the CPU the machine and each component used from the first
	// create to all pods Running.
	cpu cpuUse
}

// measure creates n claims and pods of s, waits for all pods to run,
// deletes them all and waits until every PV (emptyDir: every pod) is gone.
// bench is what every measurement uses: the cluster, the benchmark's
// client and watches, and the run's settings.
type bench struct {
	c       *launch.Cluster
	cs      kubernetes.Interface
	w       *watcher
	timeout time.Duration
	// fail reports a component that died, so a wait ends with its error.
	fail func() error
	// audit: the cluster keeps an audit log, and each measurement counts
	// the API calls made until all its pods ran.
	audit bool
}

func measure(ctx context.Context, b *bench, s series, n, id int) (*measurement, error) {
	cs, w, c, timeout, fail := b.cs, b.w, b.c, b.timeout, b.fail
	prefix := fmt.Sprintf("%s%d-", s.letter, id)
	before, err := scrapeNode(ctx, cs, c.NodeName, c.PlinthNodeMetrics)
	if err != nil {
		return nil, err
	}
	audited, err := b.auditEvents()
	if err != nil {
		return nil, err
	}
	cpuBefore, err := snapshotCPU(c)
	if err != nil {
		return nil, err
	}
	t := newTrace(prefix, n)
	w.cur.Store(t)
	defer w.cur.Store(nil)
	name := func(i int) string { return fmt.Sprintf("%s%03d", prefix, i) }

	err = fanOut(ctx, n, func(ctx context.Context, i int) error {
		if s.class != "" {
			if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, claim(name(i), s.class), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating claim: %w", err)
			}
		}
		if _, err := cs.CoreV1().Pods(namespace).Create(ctx, pod(name(i), s.class), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod: %w", err)
		}
		t.mark(name(i), created)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := waitCount(ctx, t, running, n, timeout, fail); err != nil {
		return nil, fmt.Errorf("%s N=%d: %w", s.name, n, err)
	}
	cpuAfter, err := snapshotCPU(c)
	if err != nil {
		return nil, err
	}
	m := &measurement{running: t.last(running), trace: t, cpu: cpuDelta(cpuBefore, cpuAfter)}
	after, err := scrapeNode(ctx, cs, c.NodeName, c.PlinthNodeMetrics)
	if err != nil {
		return nil, err
	}
	m.kubelet = nodeDelta(before, after)
	if b.audit {
		all, err := b.auditEvents()
		if err != nil {
			return nil, err
		}
		m.calls = tallyCalls(all[len(audited):])
	}
	if m.events, err = countEvents(ctx, cs, prefix); err != nil {
		return nil, err
	}

	delStart := time.Since(t.start)
	err = fanOut(ctx, n, func(ctx context.Context, i int) error {
		if err := cs.CoreV1().Pods(namespace).Delete(ctx, name(i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod: %w", err)
		}
		if s.class != "" {
			if err := cs.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, name(i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting claim: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	gone := pvGone
	if s.class == "" {
		gone = podGone
	}
	if err := waitCount(ctx, t, gone, n, timeout, fail); err != nil {
		return nil, fmt.Errorf("%s N=%d deletion: %w", s.name, n, err)
	}
	m.deletion = t.last(gone) - delStart
	// The next measurement starts on a quiet node: every pod gone,
	// local-path's helper pods included.
	if err := waitCount(ctx, t, podGone, n, timeout, fail); err != nil {
		return nil, fmt.Errorf("%s N=%d: pods not gone: %w", s.name, n, err)
	}
	if err := waitNoPods(ctx, cs, localpath.Namespace, timeout); err != nil {
		return nil, err
	}
	return m, nil
}

// auditEvents reads the audit log so far (nothing without -audit).
func (b *bench) auditEvents() ([]launch.AuditEvent, error) {
	if !b.audit {
		return nil, nil
	}
	ev, err := b.c.AuditEvents()
	if err != nil {
		return nil, fmt.Errorf("counting API calls: %w", err)
	}
	return ev, nil
}

// countEvents sums the occurrences of Events about objects named
// prefix*, by source component and reason.
func countEvents(ctx context.Context, cs kubernetes.Interface, prefix string) (string, error) {
	l, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing events: %w", err)
	}
	counts := map[string]int32{}
	for _, e := range l.Items {
		if !strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			continue
		}
		src := e.Source.Component
		if src == "" {
			src = e.ReportingController
		}
		counts[src+" "+e.Reason] += max(e.Count, 1)
	}
	keys := slices.Sorted(maps.Keys(counts))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", "), nil
}

// waitCount waits until n items of t reached st.
func waitCount(ctx context.Context, t *trace, st stage, n int, timeout time.Duration, fail func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for t.reached(st) < n {
		if err := fail(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d reached %q: %w", t.reached(st), n, stageNames[st], ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// waitNoPods waits until namespace ns has no pods.
func waitNoPods(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pods in %s still there after %s (last error: %v)", ns, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// fanOut runs f for 0..n-1 on a few goroutines, as `kubectl apply` of one
// file would issue them (it is sequential; a few in parallel keep the
// benchmark's own requests from being what is measured).
func fanOut(ctx context.Context, n int, f func(context.Context, int) error) error {
	const workers = 16
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// claim is a 1 MiB claim of class.
func claim(name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			},
		},
	}
}

// pod writes a file on its volume (the claim of its name, or an emptyDir
// when class is empty) and then sleeps.
func pod(name, class string) *corev1.Pod {
	vol := corev1.Volume{Name: "data"}
	if class == "" {
		vol.EmptyDir = &corev1.EmptyDirVolumeSource{}
	} else {
		vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}
	}
	grace := int64(1) // sh ignores SIGTERM as PID 1: the kill comes after 1 s
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "writer",
				Image:           images.BusyboxRef,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", "echo written > /data/file && exec sleep 3600"},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{vol},
		},
	}
}
