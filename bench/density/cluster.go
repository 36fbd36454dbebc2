package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/bench/scrape"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

const (
	namespace = metav1.NamespaceDefault
	// label marks the benchmark's pods, which the tracker watches.
	label = "bench.plinth.dev/density"
	// claimSize is each block claim's request: the benchmark is about
	// publishing, not data.
	claimSize = "1Mi"
	// createWorkers create the background's claims and pods in parallel.
	createWorkers = 8
)

// measureKubelet starts a cluster with cfg and goes through p on it.
func measureKubelet(ctx context.Context, series string, cfg launch.Config, p plan) (r kubeletRun, err error) {
	r.series = series
	c, err := launch.Start(ctx, cfg)
	if err != nil {
		return r, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		err = errors.Join(err, c.Stop(stopCtx))
	}()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return r, fmt.Errorf("reading the node: %w", err)
	}
	r.version = node.Status.NodeInfo.KubeletVersion
	logf(os.Stderr, "%s kubelet %s, maxPods %d", series, r.version, cfg.MaxPods)
	if err := waitDriver(ctx, c); err != nil {
		return r, err
	}
	// Loop devices name their backing files without symlinks.
	dataDir, err := filepath.EvalSymlinks(c.DataDir)
	if err != nil {
		return r, fmt.Errorf("resolving the data directory: %w", err)
	}
	kubeletDir := filepath.Join(dataDir, filepath.Base(c.KubeletRootDir))
	loops := func() (loopCount, error) {
		b, err := loop.Bindings()
		if err != nil {
			return loopCount{}, err
		}
		return countLoops(b, dataDir, kubeletDir), nil
	}

	t, err := startTracker(ctx, c.Client)
	if err != nil {
		return r, err
	}
	// The first block pod of a fresh cluster takes seconds longer than
	// the next (the provisioner's and the scheduler's first claim, cold
	// caches): one pod started and deleted before D=0 keeps that out of
	// the figures.
	warm, _, err := t.timePod(ctx, c.Client, warmupName)
	if err != nil {
		return r, fmt.Errorf("warming up: %w", err)
	}
	if err := deleteWarmup(ctx, c.Client, t); err != nil {
		return r, err
	}
	logf(os.Stderr, "%s: the warm-up pod (not counted) was Running after %.2fs", series, warm.Seconds())

	created := 0
	for _, d := range p.densities {
		lv := level{density: d}
		start := time.Now()
		if d > created {
			if err := createMany(ctx, c.Client, created, d); err != nil {
				return r, err
			}
			created = d
		}
		if err := t.waitRunning(ctx, created, 3*time.Minute+time.Duration(created)*time.Second); err != nil {
			return r, fmt.Errorf("background of %d: %w", d, err)
		}
		lv.background = time.Since(start)
		if lv.loops, err = loops(); err != nil {
			return r, err
		}
		logf(os.Stderr, "%s: %d block pods Running (%s to top up); loop devices: %d for volumes, %d pseudo-locks",
			series, created, lv.background.Round(100*time.Millisecond), lv.loops.volumes, lv.loops.pseudoLocks)
		for range p.perLevel {
			name := podName(created)
			created++
			before, err := kubeletOps(ctx, c.Client, c.NodeName, opMap)
			if err != nil {
				return r, err
			}
			toRunning, onNode, err := t.timePod(ctx, c.Client, name)
			if err != nil {
				return r, err
			}
			mapped, err := opsSince(ctx, c, opMap, before, 1)
			if err != nil {
				return r, err
			}
			lv.toRunning = append(lv.toRunning, toRunning)
			lv.onNode = append(lv.onNode, onNode)
			lv.mapVolume = append(lv.mapVolume, time.Duration(mapped.Sum*float64(time.Second)))
			logf(os.Stderr, "%s: D=%d %s Running after %.2fs (%.2fs on the node, map_volume %.1f ms)",
				series, d, name, toRunning.Seconds(), onNode.Seconds(), mapped.Sum*1000)
		}
		r.levels = append(r.levels, lv)
	}

	before, err := kubeletOps(ctx, c.Client, c.NodeName, opUnmap)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if err := deleteAll(ctx, c.Client, t); err != nil {
		return r, err
	}
	r.teardown = time.Since(start)
	if r.unmap, err = opsSince(ctx, c, opUnmap, before, created); err != nil {
		return r, err
	}
	if r.loopsAfter, err = loops(); err != nil {
		return r, err
	}
	logf(os.Stderr, "%s: %d block pods deleted in %s; loop devices left: %d for volumes, %d pseudo-locks",
		series, created, r.teardown.Round(100*time.Millisecond), r.loopsAfter.volumes, r.loopsAfter.pseudoLocks)
	return r, nil
}

// The kubelet's volume operations the benchmark reads (kubeletOps).
const (
	opMap   = "map_volume"
	opUnmap = "unmap_volume"
)

// opsSince waits until the kubelet counts n more successful operations op
// than before (it records one when the operation completes, which may be
// reported a little after the pod's state) and returns the difference.
func opsSince(ctx context.Context, c *launch.Cluster, op string, before scrape.Totals, n int) (scrape.Totals, error) {
	var d scrape.Totals
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := kubeletOps(ctx, c.Client, c.NodeName, op)
		if err != nil {
			return false, err
		}
		d = now.Minus(before)
		return d.Count >= uint64(n), nil
	})
	if err != nil {
		return d, fmt.Errorf("waiting for %d more %s operations in the kubelet's metrics (%d so far): %w", n, op, d.Count, err)
	}
	return d, nil
}

// waitDriver waits until plinth-node's CSI plugin is registered with the
// kubelet (the CSINode lists it): before that, block pods cannot start.
func waitDriver(ctx context.Context, c *launch.Cluster) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.StorageV1().CSINodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == names.DriverName {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CSI driver %s on the node: %w", names.DriverName, err)
	}
	return nil
}

func podName(i int) string { return fmt.Sprintf("block-%03d", i) }

// warmupName is the pod and claim started before the first level.
const warmupName = "warmup"

// deleteWarmup deletes the warm-up pod, waits until it is gone (its volume
// unpublished), and deletes its claim.
func deleteWarmup(ctx context.Context, client kubernetes.Interface, t *tracker) error {
	if err := client.CoreV1().Pods(namespace).Delete(ctx, warmupName, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the warm-up pod: %w", err)
	}
	if err := t.poll(ctx, 2*time.Minute, "the warm-up pod gone", func() (bool, string) {
		return t.pods == 0, fmt.Sprintf("%d pods", t.pods)
	}); err != nil {
		return err
	}
	if err := client.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, warmupName, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the warm-up claim: %w", err)
	}
	return nil
}

// create makes the claim and the pod named name; it returns when the pod
// was created, the moment its time starts.
func create(ctx context.Context, client kubernetes.Interface, name string) (time.Time, error) {
	block := corev1.PersistentVolumeBlock
	class := names.StorageClassName
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &block,
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(claimSize)}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("creating claim %s: %w", name, err)
	}
	// busybox's sleep as PID 1 ignores SIGTERM: a short grace period
	// keeps the teardown from waiting 30 s per pod.
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "c",
				Image:           images.BusyboxRef,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "86400"},
				VolumeDevices:   []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
			}}},
		},
	}
	start := time.Now()
	if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("creating pod %s: %w", name, err)
	}
	return start, nil
}

// createMany creates the claims and pods numbered from to to-1 in
// parallel.
func createMany(ctx context.Context, client kubernetes.Interface, from, to int) error {
	next := make(chan int)
	errs := make(chan error, createWorkers)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := create(ctx, client, podName(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := from; i < to; i++ {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

// tracker records, from a pod informer, when each of the benchmark's pods
// was first seen bound to the node and first seen Running, and forgets a
// pod once it is deleted.
type tracker struct {
	mu        sync.Mutex
	scheduled map[string]time.Time
	running   map[string]time.Time
	pods      int
}

func startTracker(ctx context.Context, client kubernetes.Interface) (*tracker, error) {
	t := &tracker{scheduled: map[string]time.Time{}, running: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = label }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, 1) },
		UpdateFunc: func(_, obj any) { t.observe(obj, 0) },
		DeleteFunc: func(obj any) { t.forget(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watching pods: %w", ctx.Err())
	}
	return t, nil
}

// observe records what a pod event shows; added counts a new pod.
func (t *tracker) observe(obj any, added int) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pods += added
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if _, seen := t.scheduled[pod.Name]; !seen && pod.Spec.NodeName != "" {
		t.scheduled[pod.Name] = now
	}
	if _, seen := t.running[pod.Name]; !seen && pod.Status.Phase == corev1.PodRunning {
		t.running[pod.Name] = now
	}
}

// forget drops a deleted pod.
func (t *tracker) forget(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	_, name, _ := cache.SplitMetaNamespaceKey(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pods--
	delete(t.scheduled, name)
	delete(t.running, name)
}

// poll checks cond on the tracker's records every 10 ms until it holds.
func (t *tracker) poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		ok, state := cond()
		last = state
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("waiting %s for %s: %w (%s)", timeout, what, err, last)
	}
	return nil
}

// waitRunning waits until n of the benchmark's pods have been Running.
func (t *tracker) waitRunning(ctx context.Context, n int, timeout time.Duration) error {
	return t.poll(ctx, timeout, fmt.Sprintf("%d pods Running", n), func() (bool, string) {
		return len(t.running) >= n, fmt.Sprintf("%d Running, %d bound to the node", len(t.running), len(t.scheduled))
	})
}

// timePod creates the pod name with its claim and returns its time from
// creation to Running and the part of it after its binding to the node.
func (t *tracker) timePod(ctx context.Context, client kubernetes.Interface, name string) (toRunning, onNode time.Duration, err error) {
	start, err := create(ctx, client, name)
	if err != nil {
		return 0, 0, err
	}
	var scheduled, running time.Time
	err = t.poll(ctx, 3*time.Minute, "pod "+name+" Running", func() (bool, string) {
		scheduled, running = t.scheduled[name], t.running[name]
		return !running.IsZero(), fmt.Sprintf("bound to the node: %t", !scheduled.IsZero())
	})
	if err != nil {
		return 0, 0, err
	}
	if scheduled.IsZero() {
		// Bound and Running in one update: nothing in between to see.
		scheduled = running
	}
	return running.Sub(start), running.Sub(scheduled), nil
}

// deleteAll deletes the benchmark's pods and waits until they are gone,
// so that the kubelet, not the launcher's sweep, unpublishes every volume.
func deleteAll(ctx context.Context, client kubernetes.Interface, t *tracker) error {
	if err := client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: label}); err != nil {
		return fmt.Errorf("deleting the pods: %w", err)
	}
	return t.poll(ctx, 5*time.Minute, "every pod deleted", func() (bool, string) {
		return t.pods == 0, fmt.Sprintf("%d pods left", t.pods)
	})
}
