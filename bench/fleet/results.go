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
// first and last points, and the value at its first point.
func slope(points []result.Point) (base, perInstance float64, ok bool) {
	if len(points) < 2 {
		return 0, 0, false
	}
	first, last := points[0], points[len(points)-1]
	if last.X == first.X {
		return 0, 0, false
	}
	b, l := result.Median(first.Runs), result.Median(last.Runs)
	per := (l - b) / (last.X - first.X)
	return b - per*first.X, per, true
}

// extrapolate says what the measured growth per node would be at 5,000
// nodes, for plinth-node as it is and for the label-selected watch.
func extrapolate(bytes, events, apiCPU, instRSS series, o options) []string {
	var notes []string
	if e0, per, ok := slope(events[seriesPlinth]); ok {
		notes = append(notes, fmt.Sprintf(
			"Each plinth-node adds %.2f claim watch events per claim change (%.1f with no node): one per watch of all claims it holds. Its controllers share one claim informer (controller.Shared); before that, the provisioner and the resizer each had their own and a node received every change twice (2.0 per node in the run of 2026-11-24).",
			per, e0))
	}
	if b0, per, ok := slope(bytes[seriesPlinth]); ok {
		at := b0 + per*extrapolationNodes
		notes = append(notes, fmt.Sprintf(
			"Watch bytes grow linearly with nodes: %.0f B more per claim change for every plinth-node (the claim's encoded size, sent to each), %.0f B with no node. At %d nodes: %.1f MB per claim change; a cluster changing 20 claims a second (binds, resizes, deletions, any controller's annotation) sends %.0f MB/s of claim events, almost all to nodes that drop them.",
			per, b0, extrapolationNodes, at/1e6, 20*at/1e6))
	}
	if c0, per, ok := slope(apiCPU[seriesPlinth]); ok && per <= 0 {
		notes = append(notes, fmt.Sprintf(
			"kube-apiserver CPU per claim change cannot be extrapolated from this run: its median falls by %.4f ms per plinth-node, so the idle rate taken around each round (the instances load the same cores as the API server) varies more than the changes add.",
			-per))
	} else if ok {
		at := c0 + per*extrapolationNodes
		notes = append(notes, fmt.Sprintf(
			"kube-apiserver CPU per claim change grows by %.4f ms per plinth-node (%.3f ms with none): at %d nodes %.0f ms per change, so 20 changes a second would take %.1f cores of the API server for claim events alone.",
			per, c0, extrapolationNodes, at, 20*at/1000))
	}
	if s0, per, ok := slope(bytes[seriesSelected]); ok {
		_, all, okAll := slope(bytes[seriesAll])
		text := fmt.Sprintf(
			"The design change: a label with the selected node on each claim, which a node's claim informer selects by (the watch cache filters before encoding and sending). With %d to %d watches selecting their node's claims, bytes per change grow by %.1f B per watch (%.0f B at the smallest fleet) — flat: each change reaches the one node it concerns",
			o.nodes[0], o.maxNodes(), per, s0+per*float64(o.nodes[0]))
		if okAll {
			text += fmt.Sprintf(", against %.0f B per watch for the same number of watches of all claims", all)
		}
		notes = append(notes, text+".")
	}
	if c0, per, ok := slope(apiCPU[seriesSelected]); ok {
		_, all, okAll := slope(apiCPU[seriesAll])
		text := fmt.Sprintf("kube-apiserver CPU per change with label-selected watches grows by %.4f ms per watch (the filter each watcher's selector costs)", per)
		if okAll {
			text += fmt.Sprintf(", against %.4f ms per watch of all claims", all)
		}
		notes = append(notes, text+fmt.Sprintf("; at %d nodes %.2f ms per change.", extrapolationNodes, c0+per*extrapolationNodes))
	}
	notes = append(notes,
		"Who sets the label: the scheduler writes only the selected-node annotation, so a cluster-side step must copy it to a label (a MutatingAdmissionPolicy on claim updates, or one small cluster-wide controller); a node could then run its claim informer with that label selector plus a second, cheap one for claims it already owns (bound to its PVs, which it already selects by its node label). Field selectors cannot do this: claims support none on annotations.")
	if p := instRSS[seriesPlinth]; len(p) > 0 {
		last := p[len(p)-1]
		notes = append(notes, fmt.Sprintf(
			"Instance RSS does not depend on the fleet's size at a fixed number of claims (median %.1f MiB at %.0f instances); it grows with the claims in the cluster (bench/footprint measures per foreign claim), so at %d nodes it follows the cluster's claim count unless the node watches only its own.",
			result.Median(last.Runs), last.X, extrapolationNodes))
	}
	return notes
}

func writeResults(o options, notes []string, apiCPU, apiRSS, bytes, events, instRSS, instCPU series) error {
	setup := []string{
		fmt.Sprintf("One bare control plane (etcd, kube-apiserver, kube-controller-manager with --kube-api-qps=500; no kubelet, no scheduler) with %d claims of Plinth's class, spread round robin over %d node names, each node registered as its kubelet would (a Node object and a CSINode listing Plinth's driver: bench/cluster.RegisterNode), each claim carrying its node in the scheduler's selected-node annotation and in label %s. Every claim is provisioned and Bound before the first round: instances in batches of %d, each batch stopped once its claims were Bound. At x instances, plinth-node processes for the first x node names run again on what they provisioned (each with its own node name, identity and data directory) and are measured once each answers /readyz, the RSS of each has settled and the CPU of kube-apiserver and the instances together is steady (5 s windows within 2%% of a core of each other three times in a row); the other nodes' claims stay Bound to PVs no running instance serves.", o.claims, o.maxNodes(), labelSelectedNode, provisionBatch),
		fmt.Sprintf("A round changes %d claims of running nodes (a merge patch of one annotation, 200/s) and waits until kube-apiserver's apiserver_watch_events_total for claims stops; bytes and events per change are the deltas of its apiserver_watch_events_sizes_sum and _total for claims (every watcher's copy counted); CPU is kube-apiserver's utime+stime over the round (/proc), and the instances' together, each minus its idle rate (the mean of %s windows just before and just after the round), per change. x = 0 is the control plane's own claim watchers.", o.changes, idleWindow),
		"'watch all claims' and 'watch own claims by label' are n plain watches from one Go process (no plinth-node running): the first is what n nodes' informers are to the API server today, the second the design change.",
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
