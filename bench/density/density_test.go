package main

import (
	"strings"
	"testing"
	"time"

	"source.plinth.dev/bench/scrape"
	"source.plinth.dev/pkg/loop"
)

func TestCountLoops(t *testing.T) {
	const data, kubelet = "/tmp/d/data", "/tmp/d/data/kubelet"
	got := countLoops([]loop.Binding{
		{Number: 0, Backing: "/tmp/d/data.img"},                                                   // the data filesystem
		{Number: 1, Backing: data + "/volumes/pvc-1.img"},                                         // a volume
		{Number: 2, Backing: data + "/volumes/pvc-2.img", Deleted: true},                          // a volume being deleted
		{Number: 3, Backing: kubelet + "/plugins/kubernetes.io/csi/volumeDevices/pvc-1/dev/0a1b"}, // pseudo-lock
		{Number: 4, Backing: "/dev/loop1"},                                                        // pseudo-lock on the device
		{Number: 5, Backing: "/var/tmp/other.img"},                                                // someone else's
		{Number: 6, Backing: "/tmp/d/data2/volumes/x.img"},                                        // a sibling directory
		{Number: 7, Backing: kubelet + "x/volumes/y.img"},                                         // below data, not the kubelet's
	}, data, kubelet)
	want := loopCount{volumes: 3, pseudoLocks: 2}
	if got != want {
		t.Errorf("countLoops = %+v, want %+v", got, want)
	}
}

func TestPlanPods(t *testing.T) {
	for _, tc := range []struct {
		p    plan
		want int
	}{
		{plan{densities: []int{0, 50, 100, 200}, perLevel: 5}, 205},
		{plan{densities: []int{0, 10}, perLevel: 2}, 12},
		// The new pods of one level outgrow the next level's background.
		{plan{densities: []int{0, 3}, perLevel: 5}, 10},
	} {
		if got := tc.p.pods(); got != tc.want {
			t.Errorf("%+v: pods() = %d, want %d", tc.p, got, tc.want)
		}
		if tc.p.maxPods() <= tc.p.pods() {
			t.Errorf("%+v: maxPods %d leaves no room for %d pods", tc.p, tc.p.maxPods(), tc.p.pods())
		}
	}
	if full := (plan{densities: []int{0, 50, 100, 200}, perLevel: 5}); full.maxPods() > 250 {
		t.Errorf("full plan: maxPods %d does not fit the node's /24 pod network", full.maxPods())
	}
}

func TestBuildResults(t *testing.T) {
	p := plan{densities: []int{0, 200}, perLevel: 3}
	s := func(v ...float64) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x*float64(time.Second)))
		}
		return out
	}
	runs := []kubeletRun{
		{series: seriesPatched, version: "v1.34.4-plinth", levels: []level{
			{density: 0, toRunning: s(2, 1, 3), onNode: s(1, 1, 1), mapVolume: s(0.01), loops: loopCount{volumes: 0}},
			{density: 200, toRunning: s(2, 2, 2), onNode: s(1, 1, 1), mapVolume: s(0.01), loops: loopCount{volumes: 200}},
		}},
		{series: seriesUpstream, version: "v1.34.4", levels: []level{
			{density: 0, toRunning: s(2, 2, 2), onNode: s(1, 1, 1), mapVolume: s(0.02)},
			{density: 200, toRunning: s(5, 4, 6), onNode: s(3, 3, 3), mapVolume: s(0.02, 0.03, 0.04), loops: loopCount{volumes: 200, pseudoLocks: 200}},
		}},
	}
	rs := buildResults(runs, p)
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4", len(rs))
	}
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
	}
	tr := rs[0]
	if tr.Name != "block-density" || tr.Baseline != seriesUpstream {
		t.Errorf("first result %s with baseline %q, want block-density against upstream", tr.Name, tr.Baseline)
	}
	if got := tr.Series[1].Points[1].Runs; len(got) != 3 || got[0] != 5 || got[2] != 6 {
		t.Errorf("upstream at D=200 has runs %v, want every pod's time [5 4 6]", got)
	}
	notes := strings.Join(tr.Notes, "\n")
	for _, want := range []string{"patched: median 2.00s at D=0, 2.00s at D=200: ratio D=200 / D=0 = 1.00",
		"upstream: median 2.00s at D=0, 5.00s at D=200: ratio D=200 / D=0 = 2.50", "D=200: 400 (200 volumes + 200 pseudo-locks)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if got := rs[3].Series[1].Points[1].Runs; len(got) != 1 || got[0] != 400 {
		t.Errorf("upstream loop devices at D=200: %v, want [400]", got)
	}
	if got := rs[2].Series[1].Points[1].Runs; rs[2].Name != "block-density-map" || len(got) != 3 || got[1] != 30 {
		t.Errorf("%s: upstream at D=200 has %v, want every pod's map_volume in ms [20 30 40]", rs[2].Name, got)
	}
	// Without the upstream kubelet there is nothing to compare with.
	if only := buildResults(runs[:1], p); only[0].Baseline != "" {
		t.Errorf("baseline %q without an upstream series", only[0].Baseline)
	}
}

func TestSuccessfulOps(t *testing.T) {
	const text = `# HELP storage_operation_duration_seconds [ALPHA] Storage operation duration
# TYPE storage_operation_duration_seconds histogram
storage_operation_duration_seconds_bucket{migrated="false",operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev",le="0.1"} 3
storage_operation_duration_seconds_bucket{migrated="false",operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev",le="+Inf"} 3
storage_operation_duration_seconds_sum{migrated="false",operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 0.06
storage_operation_duration_seconds_count{migrated="false",operation_name="map_volume",status="success",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 3
storage_operation_duration_seconds_bucket{migrated="false",operation_name="map_volume",status="fail-unknown",volume_plugin="kubernetes.io/csi:storage.plinth.dev",le="+Inf"} 1
storage_operation_duration_seconds_sum{migrated="false",operation_name="map_volume",status="fail-unknown",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 5
storage_operation_duration_seconds_count{migrated="false",operation_name="map_volume",status="fail-unknown",volume_plugin="kubernetes.io/csi:storage.plinth.dev"} 1
storage_operation_duration_seconds_bucket{migrated="false",operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/projected",le="+Inf"} 7
storage_operation_duration_seconds_sum{migrated="false",operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/projected"} 0.7
storage_operation_duration_seconds_count{migrated="false",operation_name="volume_mount",status="success",volume_plugin="kubernetes.io/projected"} 7
`
	s, err := scrape.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := successful(s, opMap); got.Count != 3 || got.Sum != 0.06 {
		t.Errorf("map_volume = %+v, want the 3 successful ones summing 0.06 s", got)
	}
	none, err := scrape.Parse(strings.NewReader("# no histogram yet\n"))
	if err != nil || successful(none, opMap).Count != 0 {
		t.Errorf("a scrape without the histogram: %+v, %v; want zero operations", successful(none, opMap), err)
	}
}
