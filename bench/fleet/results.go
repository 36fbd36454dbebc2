package main

import (
	"fmt"
	"slices"

	"source.plinth.dev/bench/procstat"
	"source.plinth.dev/bench/result"
)

// extrapolationNodes is the cluster size issue 14 asks the notes to
// extrapolate to.
const extrapolationNodes = 5000

// slope is the growth per instance of a series' medians between its
// first point with instances (x > 0) and its last, and the value that
// line gives at x = 0. The control plane alone (x = 0) is left out of the
// line: what its own watchers receive is no part of how a node's cost
// grows, and a line from it would mistake a constant for growth.
func slope(points []result.Point) (base, perInstance float64, ok bool) {
	i := slices.IndexFunc(points, func(p result.Point) bool { return p.X > 0 })
	if i < 0 || len(points)-i < 2 {
		return 0, 0, false
	}
	first, last := points[i], points[len(points)-1]
	if last.X == first.X {
		return 0, 0, false
	}
	b, l := result.Median(first.Runs), result.Median(last.Runs)
	per := (l - b) / (last.X - first.X)
	return b - per*first.X, per, true
}

// extrapolate says what the measured growth per node would be at 5,000
// nodes, for plinth-node and for the plain watches it is compared with.
func extrapolate(bytes, events, apiCPU, instRSS series, o options) []string {
	var notes []string
	if e0, per, ok := slope(events[seriesPlinth]); ok {
		notes = append(notes, fmt.Sprintf(
			"Claim watch events per claim change grow by %.3f per plinth-node between %d and %d instances (%.2f on that line at none): at %d nodes %.1f events per change.",
			per, o.nodes[0], o.maxNodes(), e0, extrapolationNodes, e0+per*extrapolationNodes))
	}
	if b0, per, ok := slope(bytes[seriesPlinth]); ok {
		at := b0 + per*extrapolationNodes
		notes = append(notes, fmt.Sprintf(
			"Watch bytes per claim change grow by %.2f B per plinth-node between %d and %d instances: at %d nodes %.1f KB per claim change, and a cluster changing 20 claims a second sends %.2f MB/s of claim events.",
			per, o.nodes[0], o.maxNodes(), extrapolationNodes, at/1e3, 20*at/1e6))
	}
	if _, all, ok := slope(bytes[seriesAll]); ok {
		notes = append(notes, fmt.Sprintf(
			"For comparison, watches of all claims (what every node held before claims carried their node label) add %.0f B per watch and claim change: %.1f MB per change at %d nodes.",
			all, all*extrapolationNodes/1e6, extrapolationNodes))
	}
	if c0, per, ok := slope(apiCPU[seriesPlinth]); ok {
		notes = append(notes, fmt.Sprintf(
			"kube-apiserver CPU per claim change changes by %.4f ms per plinth-node between %d and %d instances (%.3f ms on that line at none); the idle rate taken around each round (the instances load the same two cores as the API server) moves by more than that, so read it against the spread of the label-selected watches.",
			per, o.nodes[0], o.maxNodes(), c0))
	}
	notes = append(notes, fmt.Sprintf(
		"Each claim of Plinth's carries label %s, the node it is placed on, written by the admission server in the write that places it (docs/security.md, 'The claim label'); a node's claim informer selects its own alone.",
		"storage.plinth.dev/node"))
	if p := instRSS[seriesPlinth]; len(p) > 0 {
		last := p[len(p)-1]
		notes = append(notes, fmt.Sprintf(
			"Instance RSS at %.0f instances: median %.1f MiB; a node holds only its own claims, so it does not grow with the other nodes' claims.",
			last.X, result.Median(last.Runs)))
	}
	return notes
}

func writeResults(o options, notes []string, apiCPU, apiRSS, bytes, events, instRSS, instCPU series) error {
	setup := []string{
		fmt.Sprintf("One bare control plane (etcd, kube-apiserver, kube-controller-manager with --kube-api-qps=500; no kubelet, no scheduler) with %d claims of Plinth's class, spread round robin over %d node names, each node registered as its kubelet would (a Node object and a CSINode listing Plinth's driver: bench/cluster.RegisterNode), each claim carrying its node in the scheduler's selected-node annotation and in label %s. Every claim is provisioned and Bound before the first round, by all %d instances running at once, stopped once every claim was Bound. At x instances, plinth-node processes for the first x node names run again on what they provisioned (each with its own node name, identity and data directory) and are measured once each answers /readyz, the RSS of each has settled and the CPU of kube-apiserver and the instances together is steady (5 s windows within 2%% of a core of each other three times in a row); the other nodes' claims stay Bound to PVs no running instance serves.", o.claims, o.maxNodes(), labelSelectedNode, o.maxNodes()),
		fmt.Sprintf("A round changes %d claims of running nodes (a merge patch of one annotation, 200/s) and waits until kube-apiserver's apiserver_watch_events_total for claims stops; bytes and events per change are the deltas of its apiserver_watch_events_sizes_sum and _total for claims (every watcher's copy counted); CPU is kube-apiserver's utime+stime over the round (/proc), and the instances' together; each figure minus its idle rate over the round's length (the mean of %s windows just before and just after the round: for watch events, the bookmarks the API server sends each informer about once a minute), per change. x = 0 is the control plane's own claim watchers.", o.changes, idleWindow),
		"'watch all claims' and 'watch own claims by label' are n plain watches from one Go process (no plinth-node running): the first is what n nodes' claim informers were before claims carried their node label, the second the floor plinth-node's selected informers should match.",
	}
	all := append(setup, notes...)
	results := []*result.Result{
		{Name: "fleet-watch-bytes", Title: "Claim watch bytes sent by kube-apiserver per claim change",
			X: result.Axis{Label: "provisioner instances"}, Y: result.Axis{Label: "bytes per change", Unit: "B"},
			Series: bytes.list(seriesPlinth, seriesAll, seriesSelected), Notes: all},
		{Name: "fleet-apiserver-cpu", Title: "kube-apiserver CPU per claim change",
			X: result.Axis{Label: "provisioner instances"}, Y: result.Axis{Label: "CPU per change", Unit: "ms"},
			Series: apiCPU.list(seriesPlinth, seriesAll, seriesSelected), Notes: setup},
		{Name: "fleet-apiserver-rss", Title: "kube-apiserver resident memory with the fleet running",
			X: result.Axis{Label: "provisioner instances"}, Y: result.Axis{Label: "RSS", Unit: "MiB"},
			Series: apiRSS.list(seriesPlinth), Notes: setup[:1]},
		// Clipped: the note appended to setup's first must not take the
		// place of its second, which other results show.
		{Name: "fleet-instance-rss", Title: "plinth-node resident memory per instance in the fleet",
			X: result.Axis{Label: "provisioner instances"}, Y: result.Axis{Label: "RSS", Unit: "MiB"},
			Series: instRSS.list(seriesPlinth), Notes: append(slices.Clip(setup[:1]), "Runs are the instances: one RSS each, read once "+procstat.SettleRule()+", all instances at once.")},
		{Name: "fleet-instance-cpu", Title: "CPU of all plinth-node instances together per claim change",
			X: result.Axis{Label: "provisioner instances"}, Y: result.Axis{Label: "CPU per change", Unit: "ms"},
			Series: instCPU.list(seriesPlinth), Notes: setup[:2]},
		{Name: "fleet-watch-events", Title: "Claim watch events sent per claim change",
			X: result.Axis{Label: "provisioner instances"}, Y: result.Axis{Label: "events per change"},
			Series: events.list(seriesPlinth), Notes: setup[:2]},
	}
	if ex := extrapolated(bytes); ex != nil {
		results = append(results, ex)
	}
	for _, r := range results {
		if err := result.Write(o.out, r); err != nil {
			return err
		}
	}
	return nil
}

// extrapolated is fleet-watch-bytes' linear fit carried to 5,000 nodes:
// computed, not measured, so that the table shows the figure the notes
// argue from.
func extrapolated(bytes series) *result.Result {
	r := &result.Result{Name: "fleet-watch-bytes-5000", Title: "Claim watch bytes per claim change, extrapolated to 5,000 nodes",
		X: result.Axis{Label: "nodes"}, Y: result.Axis{Label: "bytes per change", Unit: "B"},
		Notes: []string{"Computed, not measured: each series' straight line through its first and last measured medians in fleet-watch-bytes, evaluated at 100, 1,000 and 5,000 nodes (one value each)."}}
	for _, name := range []string{seriesPlinth, seriesSelected} {
		b0, per, ok := slope(bytes[name])
		if !ok {
			continue
		}
		s := result.Series{Name: name}
		for _, x := range []float64{100, 1000, extrapolationNodes} {
			s.Points = append(s.Points, result.Point{X: x, Runs: []float64{b0 + per*x}})
		}
		r.Series = append(r.Series, s)
	}
	if len(r.Series) == 0 {
		return nil
	}
	return r
}
