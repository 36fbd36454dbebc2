package main

import (
	"fmt"
	"strings"
	"time"

	"source.plinth.dev/bench/result"
)

// buildResults turns the kubelets' runs into the benchmark's Results: the
// time to Running (the figure the issue asks for), its part on the node,
// and the loop devices at each density.
func buildResults(runs []kubeletRun, p plan) []*result.Result {
	x := result.Axis{Label: "block volumes already published on the node (D)"}
	lo, hi := p.densities[0], p.densities[len(p.densities)-1]
	setup := fmt.Sprintf("test/launch's single-node cluster with plinth-node, one per kubelet; "+
		"the background grows %v block volumes (one pod with one %s claim of StorageClass local each, all Running), "+
		"then %d new pods are started one at a time, timed as the benchmark's pod informer sees them; "+
		"the new pods stay, so the k-th new pod at D sees D+k-1 volumes", p.densities, claimSize, p.perLevel)
	var versions []string
	for _, r := range runs {
		versions = append(versions, fmt.Sprintf("%s: kubelet %s", r.series, r.version))
	}
	kubelets := "kubelets: " + strings.Join(versions, "; ")

	toRunning := &result.Result{
		Name:     "block-density",
		Title:    "Pod with a block volume to Running, beside D published block volumes",
		X:        x,
		Y:        result.Axis{Label: "pod creation to Running", Unit: "s"},
		Baseline: baselineOf(runs),
		Goals: []string{
			"upstream's time grows with D (its losetup pseudo-lock per block volume scans every loop device)",
			fmt.Sprintf("patched stays flat: median at D=%d / D=%d about 1", hi, lo),
		},
	}
	onNode := &result.Result{
		Name:     "block-density-node",
		Title:    "The kubelet's share: pod bound to the node to Running, beside D published block volumes",
		X:        x,
		Y:        result.Axis{Label: "pod bound to the node to Running", Unit: "s"},
		Baseline: toRunning.Baseline,
		Goals:    []string{fmt.Sprintf("patched flat in D (D=%d / D=%d about 1)", hi, lo)},
	}
	mapVolume := &result.Result{
		Name:     "block-density-map",
		Title:    "The kubelet's map_volume operation for a new block volume, beside D published block volumes",
		X:        x,
		Y:        result.Axis{Label: "map_volume (CSI publish + the kubelet's own mapping)", Unit: "ms"},
		Baseline: toRunning.Baseline,
		Goals:    []string{fmt.Sprintf("patched flat in D (D=%d / D=%d about 1); upstream pays a losetup scan of every loop device per volume", hi, lo)},
	}
	loops := &result.Result{
		Name:  "block-density-loops",
		Title: "Loop devices bound for D published block volumes",
		X:     x,
		Y:     result.Axis{Label: "loop devices", Unit: "devices"},
		Goals: []string{"patched: one per volume (Plinth's own); upstream adds a pseudo-lock per volume"},
		Notes: []string{"counted with pkg/loop.Bindings when the new pods of each D were about to start: bound to a volume image below the data directory (Plinth's), or to a device file below the kubelet's root or in /dev (the kubelet's pseudo-locks)"},
	}
	for _, r := range runs {
		tr := result.Series{Name: r.series}
		on := result.Series{Name: r.series}
		lp := result.Series{Name: r.series}
		mv := result.Series{Name: r.series}
		var counts []string
		for _, lv := range r.levels {
			tr.Points = append(tr.Points, result.Point{X: float64(lv.density), Runs: seconds(lv.toRunning)})
			on.Points = append(on.Points, result.Point{X: float64(lv.density), Runs: seconds(lv.onNode)})
			mv.Points = append(mv.Points, result.Point{X: float64(lv.density), Runs: millis(lv.mapVolume)})
			lp.Points = append(lp.Points, result.Point{X: float64(lv.density), Runs: []float64{float64(lv.loops.total())}})
			counts = append(counts, fmt.Sprintf("D=%d: %d (%d volumes + %d pseudo-locks)", lv.density, lv.loops.total(), lv.loops.volumes, lv.loops.pseudoLocks))
		}
		toRunning.Series = append(toRunning.Series, tr)
		onNode.Series = append(onNode.Series, on)
		loops.Series = append(loops.Series, lp)
		mapVolume.Series = append(mapVolume.Series, mv)
		mapVolume.Notes = append(mapVolume.Notes, growth(r.series, mv, lo, hi, "ms"),
			fmt.Sprintf("%s: unmap_volume while all pods were deleted at once (%s until the last was gone): %d operations, %.1f ms each on average; they overlap and wait on each other, so this is not a per-volume cost comparable with map_volume",
				r.series, r.teardown.Round(100*time.Millisecond), r.unmap.Count, r.unmap.Mean()*1000))
		toRunning.Notes = append(toRunning.Notes, growth(r.series, tr, lo, hi, "s"))
		onNode.Notes = append(onNode.Notes, growth(r.series, on, lo, hi, "s"))
		loopNote := fmt.Sprintf("%s loop devices: %s; after deleting every pod (%s): %d volumes, %d pseudo-locks left",
			r.series, strings.Join(counts, ", "), r.teardown.Round(100*time.Millisecond), r.loopsAfter.volumes, r.loopsAfter.pseudoLocks)
		loops.Notes = append(loops.Notes, loopNote)
		toRunning.Notes = append(toRunning.Notes, loopNote)
	}
	toRunning.Notes = append(toRunning.Notes, setup,
		"pod start-up advances in steps of the control plane's and the kubelet's polling (the kubelet relists pods every 1 s), so a cost of milliseconds does not show here: block-density-map times the kubelet's mapping of the volume itself",
		kubelets)
	onNode.Notes = append(onNode.Notes,
		"from the informer's first sight of spec.nodeName (the scheduler's binding, after the claim was provisioned and bound) to its first sight of phase Running: the kubelet's volume mapping, sandbox and container start", kubelets)
	mapVolume.Notes = append(mapVolume.Notes,
		"the change of the kubelet's storage_operation_duration_seconds{operation_name=\"map_volume\"} sum across each new pod, read through the API server's node proxy: one operation per pod, timed inside the kubelet, so below the 1 s steps of pod start-up", kubelets)
	loops.Notes = append(loops.Notes, kubelets)
	return []*result.Result{toRunning, onNode, mapVolume, loops}
}

// baselineOf names upstream the baseline when it was measured.
func baselineOf(runs []kubeletRun) string {
	for _, r := range runs {
		if r.series == seriesUpstream {
			return seriesUpstream
		}
	}
	return ""
}

// growth says how a series' median changed from x=lo to x=hi.
func growth(series string, s result.Series, lo, hi int, unit string) string {
	var l, h []float64
	for _, p := range s.Points {
		switch int(p.X) {
		case lo:
			l = p.Runs
		case hi:
			h = p.Runs
		}
	}
	if len(l) == 0 || len(h) == 0 || result.Median(l) == 0 {
		return fmt.Sprintf("%s: no ratio D=%d / D=%d (a level is missing)", series, hi, lo)
	}
	ml, mh := result.Median(l), result.Median(h)
	return fmt.Sprintf("%s: median %.2f%s at D=%d, %.2f%s at D=%d: ratio D=%d / D=%d = %.2f", series, ml, unit, lo, mh, unit, hi, hi, lo, mh/ml)
}

func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}
