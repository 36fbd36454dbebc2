package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/procstat"
)

// churnFigures are what one round of claim changes cost.
type churnFigures struct {
	// changes is the number of claim changes of the round.
	changes int
	// bytesPerChange and eventsPerChange are what the API server sent to
	// claim watchers per claim change (all watchers together).
	bytesPerChange, eventsPerChange float64
	// apiCPU and instCPU are the CPU kube-apiserver and the instances
	// (together) used over the round, which lasted wall.
	apiCPU, instCPU, wall time.Duration
}

// idleRates are what is spent with no claim changing, per second: CPU
// (in cores) of kube-apiserver and of the instances together, and the
// claim watch events and bytes the API server sends all the same, the
// bookmarks it sends each watcher about once a minute.
type idleRates struct {
	api, inst     float64
	events, bytes float64
}

// perChange is cpu (used over the round) per change with what the
// processes use idle, at rate idle, taken off.
func (f churnFigures) perChange(cpu time.Duration, idle float64) time.Duration {
	return (cpu - time.Duration(idle*float64(f.wall))) / time.Duration(f.changes)
}

// watchPerChange is the round's claim watch events and bytes per change
// with what idle watchers receive over as long taken off: with 200 nodes'
// informers, their bookmarks alone came to 0.2 events per change.
func (f churnFigures) watchPerChange(idle idleRates) (events, bytes float64) {
	sec, n := f.wall.Seconds(), float64(f.changes)
	return f.eventsPerChange - idle.events*sec/n, f.bytesPerChange - idle.bytes*sec/n
}

// idleAround is the idle rates in windows of d before and after a round
// (measure), their means: a baseline that drifts during the round is
// taken at its middle, not at its start. instances are the measured
// processes besides kube-apiserver.
func (w *world) idleAround(ctx context.Context, d time.Duration, instances []int, measure func() error) (idleRates, error) {
	before, err := w.idleWindow(ctx, d, instances)
	if err != nil {
		return idleRates{}, err
	}
	if err := measure(); err != nil {
		return idleRates{}, err
	}
	after, err := w.idleWindow(ctx, d, instances)
	if err != nil {
		return idleRates{}, err
	}
	return idleRates{
		api: (before.api + after.api) / 2, inst: (before.inst + after.inst) / 2,
		events: (before.events + after.events) / 2, bytes: (before.bytes + after.bytes) / 2,
	}, nil
}

// idleWindow measures idleRates over d.
func (w *world) idleWindow(ctx context.Context, d time.Duration, instances []int) (idleRates, error) {
	start, err := scrapeWatch(ctx, w.fast)
	if err != nil {
		return idleRates{}, err
	}
	began := time.Now()
	cpu, err := procstat.Rates(d, []int{w.cp.APIServer}, instances)
	if err != nil {
		return idleRates{}, err
	}
	end, err := scrapeWatch(ctx, w.fast)
	if err != nil {
		return idleRates{}, err
	}
	sec := time.Since(began).Seconds()
	return idleRates{api: cpu[0], inst: cpu[1], events: (end.events - start.events) / sec, bytes: (end.bytes - start.bytes) / sec}, nil
}

// churn changes n claims of the running nodes (an annotation, as any
// controller's or user's update does: every watcher of claims receives
// the whole object), waits until the API server has sent the last event,
// and returns what that cost; instances are the measured processes
// besides kube-apiserver.
func (w *world) churn(ctx context.Context, nodes, n int, instances []int) (churnFigures, error) {
	f := churnFigures{changes: n}
	// Every round writes values no earlier round wrote: a patch that sets
	// what is already there changes nothing and sends no event.
	w.round++
	round := w.round
	before, err := scrapeWatch(ctx, w.fast)
	if err != nil {
		return f, err
	}
	api, err := procstat.StartSampler(w.cp.APIServer)
	if err != nil {
		return f, err
	}
	var inst []*procstat.Sampler
	for _, pid := range instances {
		s, err := procstat.StartSampler(pid)
		if err != nil {
			return f, err
		}
		inst = append(inst, s)
	}
	perNode := w.o.claims / w.o.maxNodes()
	if err := cluster.Parallel(n, 8, func(i int) error {
		// Change i goes to node i%nodes, each change to another claim.
		node, k := i%nodes, (round*n+i)/nodes%perNode
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.plinth.dev/touch":"%d-%d"}}}`, round, i)
		_, err := w.churner.CoreV1().PersistentVolumeClaims(namespace).Patch(ctx, claimName(node, k, w.o.maxNodes()),
			types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}); err != nil {
		return f, fmt.Errorf("changing claims: %w", err)
	}
	// The watchers have everything once the sent-event count stops, but
	// for bookmarks: each informer (the instances', not the benchmark's
	// plain watches) receives one about once a minute, and 200 of them
	// never leave three quiet seconds in a row. A second with no more than
	// three times their mean rate counts as quiet.
	quiet := 3 * len(instances) / 60
	after := before
	for still := 0; still < 3; {
		time.Sleep(time.Second)
		cur, err := scrapeWatch(ctx, w.fast)
		if err != nil {
			return f, err
		}
		if cur.events-after.events <= float64(quiet) {
			still++
		} else {
			still = 0
		}
		after = cur
	}
	if f.apiCPU, f.wall, err = api.Used(); err != nil {
		return f, err
	}
	for _, s := range inst {
		c, _, err := s.Used()
		if err != nil {
			return f, err
		}
		f.instCPU += c
	}
	f.bytesPerChange = (after.bytes - before.bytes) / float64(n)
	f.eventsPerChange = (after.events - before.events) / float64(n)
	return f, nil
}

// claimName is claim k of node (of nodes in all): claims are spread over
// the nodes round robin.
func claimName(node, k, nodes int) string { return fmt.Sprintf("c%05d", k*nodes+node) }

func nodeName(i int) string { return fmt.Sprintf("fleet-%03d", i) }

// labelSelectedNode is the label the design change would put on every
// claim once its node is selected, so that each node can watch only its
// own claims (a label selector the API server's watch cache filters by).
const labelSelectedNode = "bench.plinth.dev/selected-node"

// newWatchers starts n watches of claims from one process, all claims or,
// selected, only those labelled for node i, and returns how to stop them
// and how many events they have received in all (read it after stop).
func newWatchers(ctx context.Context, c kubernetes.Interface, n int, selected bool) (stop func(), received func() int64, err error) {
	list, err := c.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the claims' resource version: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	counts := make([]int64, n)
	done := make(chan struct{}, n)
	for i := range n {
		opts := metav1.ListOptions{ResourceVersion: list.ResourceVersion}
		if selected {
			opts.LabelSelector = labelSelectedNode + "=" + nodeName(i)
		}
		wi, err := c.CoreV1().PersistentVolumeClaims(namespace).Watch(ctx, opts)
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("watching claims: %w", err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-wi.ResultChan():
					if !ok {
						return
					}
					counts[i]++
				}
			}
		}()
	}
	stop = func() {
		cancel()
		for range n {
			<-done
		}
	}
	received = func() int64 {
		var t int64
		for _, c := range counts {
			t += c
		}
		return t
	}
	return stop, received, nil
}
