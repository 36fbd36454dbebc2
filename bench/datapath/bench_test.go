package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"source.plinth.dev/bench/fio"
)

// TestFloorPodsDifferFromVolumePodsOnlyInVolume: an in-pod floor is a fair
// baseline only if its pod is the volume's pod but for the volume. Each
// floor's spec, with its volume and name put back to the volume's, is the
// volume pod's spec; and the floor's volume is a hostPath of the node's
// path, of a type that must exist.
func TestFloorPodsDifferFromVolumePodsOnlyInVolume(t *testing.T) {
	b := &bench{floorDir: "/data/datapath-floor", image: "/data/volumes/pvc-x.img", volFile: "/data/volumes/pvc-y/fio.dat"}
	for _, tc := range []struct {
		floor, volume string
		path          string
		typ           corev1.HostPathType
	}{
		{podDir, fsRunc, b.floorDir, corev1.HostPathDirectory},
		{podVolFile, fsRunc, b.volFile, corev1.HostPathFile},
		{podImage, blockRunc, b.image, corev1.HostPathFile},
	} {
		fp, err := b.pod(tc.floor, "r1")
		if err != nil {
			t.Fatal(err)
		}
		vp, err := b.pod(tc.volume, "r1")
		if err != nil {
			t.Fatal(err)
		}
		f, v := fp.spec(roundArgs(fp.target(), fileSize, timing{})), vp.spec(roundArgs(vp.target(), fileSize, timing{}))
		hp := f.Spec.Volumes[0].HostPath
		if hp == nil || hp.Path != tc.path || hp.Type == nil || *hp.Type != tc.typ {
			t.Errorf("%s: volume %+v, want hostPath %s of type %s", tc.floor, f.Spec.Volumes[0].VolumeSource, tc.path, tc.typ)
		}
		// The floor's fio opens its own path; the rest of each
		// container must be the volume's.
		f.Name, f.Spec.Volumes = v.Name, v.Spec.Volumes
		fc, vc := &f.Spec.Containers[0], &v.Spec.Containers[0]
		fc.Args, fc.VolumeMounts, fc.VolumeDevices = vc.Args, vc.VolumeMounts, vc.VolumeDevices
		if !reflect.DeepEqual(f, v) {
			t.Errorf("%s differs from %s in more than its volume:\n%+v\n%+v", tc.floor, tc.volume, f, v)
		}
	}
}

// TestFloorImagePodOpensTheImageFile: the image floor's fio opens the
// image file itself, mounted as a file at the path fio is given.
func TestFloorImagePodOpensTheImageFile(t *testing.T) {
	b := &bench{floorDir: "/d", image: "/data/volumes/pvc-x.img"}
	p, err := b.pod(podImage, "r1")
	if err != nil {
		t.Fatal(err)
	}
	c := p.spec(roundArgs(p.target(), fileSize, timing{})).Spec.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != p.target() || len(c.VolumeDevices) != 0 {
		t.Errorf("mounts %+v, devices %+v: want the image file mounted at %s", c.VolumeMounts, c.VolumeDevices, p.target())
	}
	if !slices.Contains(c.Args, "--filename="+p.target()) || !slices.Contains(c.Args, "--direct=1") {
		t.Errorf("args %v: want fio on %s with direct I/O", c.Args, p.target())
	}
	if _, err := (&bench{floorDir: "/d"}).pod(podImage, "r1"); err == nil {
		t.Error("the image floor's pod was made before the image was found")
	}
	if _, err := b.pod(nodeDir, "r1"); err == nil {
		t.Errorf("%s, the node's own fio, was given a pod", nodeDir)
	}
}

// setRuns gives target in all the IOPS of each round, the same at every
// workload.
func setRuns(all runs, target string, iops ...float64) {
	all[target] = map[string][]fio.Measure{}
	for _, w := range workloads {
		for _, v := range iops {
			all[target][w.Name] = append(all[target][w.Name], fio.Measure{IOPS: v})
		}
	}
}

// TestVerdictsJudgeVolumesAgainstTheInPodFloors: the goal is read against
// each in-pod floor, and the node's fio, shown beside them, gets no
// verdict.
func TestVerdictsJudgeVolumesAgainstTheInPodFloors(t *testing.T) {
	k := kinds[0]
	all := runs{}
	// The volume is 0.98 of the in-pod floors, 0.88 of the node's.
	five := func(v float64) []float64 { return []float64{v, v, v, v, v} }
	setRuns(all, nodeDir, five(1000)...)
	setRuns(all, podDir, five(900)...)
	setRuns(all, podVolFile, five(900)...)
	setRuns(all, fsRunc, five(882)...)
	setRuns(all, fsGVisor, five(450)...)
	got := verdicts(all, k, metrics[0])
	if len(got) != len(k.series)*len(k.floors) {
		t.Fatalf("verdicts %q: want one per volume series %v and floor %v", got, k.series, k.floors)
	}
	for i, want := range []string{
		"Goal met: " + fsRunc + " at least 0.97 of " + podDir,
		"Goal met: " + fsRunc + " at least 0.97 of " + podVolFile,
		"Goal NOT met: " + fsGVisor + " below 0.97 of " + podDir,
		"Goal NOT met: " + fsGVisor + " below 0.97 of " + podVolFile,
	} {
		if !strings.HasPrefix(got[i], want) {
			t.Errorf("verdict %q: want it to start %q", got[i], want)
		}
	}
	if !strings.Contains(got[2], "1 0.500 [0.500, 0.500]") {
		t.Errorf("verdict %q: want %s at 0.500 of %s", got[2], fsGVisor, podDir)
	}
	for _, v := range got {
		if strings.Contains(v, nodeDir) {
			t.Errorf("verdict %q names the node's floor", v)
		}
	}
}

// TestVerdictsPairRounds: a machine that drifts from round to round moves
// a volume and its floor together; the ratio of each round's pair stays
// put, and the verdict reads it. Unpaired, the same figures would reach
// from 0.66 to 1.49 and could not be judged.
func TestVerdictsPairRounds(t *testing.T) {
	k := kind{name: "filesystem", floors: []string{podDir}, series: []string{fsRunc}, goal: 0.97}
	all := runs{}
	setRuns(all, podDir, 1000, 1500, 700, 1200, 1000, 900)
	setRuns(all, fsRunc, 990, 1485, 693, 1188, 990, 891)
	got := verdicts(all, k, metrics[0])
	if len(got) != 1 || !strings.HasPrefix(got[0], "Goal met: ") || !strings.Contains(got[0], "1 0.990 [0.990, 0.990]") {
		t.Errorf("verdicts %q: want the goal met at 0.990 of the floor", got)
	}
	// Latencies: the floor's over the volume's.
	all = runs{podDir: {}, fsRunc: {}}
	for _, w := range workloads {
		for _, p99 := range []float64{1e-3, 2e-3, 1e-3, 3e-3, 1e-3} {
			all[podDir][w.Name] = append(all[podDir][w.Name], fio.Measure{P99: p99})
			all[fsRunc][w.Name] = append(all[fsRunc][w.Name], fio.Measure{P99: 1.25 * p99})
		}
	}
	if got := verdicts(all, k, metrics[3]); !strings.HasPrefix(got[0], "Goal NOT met: ") || !strings.Contains(got[0], "1 0.800 [0.800, 0.800]") {
		t.Errorf("p99 verdicts %q: want the goal missed at 0.800", got)
	}
}

// TestVerdictsSayWhenRoundsCannotTell: ratios that straddle the goal are
// neither met nor missed; enough rounds above it are met.
func TestVerdictsSayWhenRoundsCannotTell(t *testing.T) {
	k := kind{name: "filesystem", floors: []string{podDir}, series: []string{fsRunc}, goal: 0.97}
	all := runs{}
	setRuns(all, podDir, 100, 100, 100, 100, 100)
	setRuns(all, fsRunc, 92, 99, 100, 101, 104)
	if got := verdicts(all, k, metrics[0]); !strings.HasPrefix(got[0], "Goal undecided: ") || !strings.Contains(got[0], "1 1.000 [0.920, 1.040]") || !strings.Contains(got[0], "94% interval") {
		t.Errorf("verdicts %q: want undecided, 1.000 in [0.920, 1.040] at 94%%", got)
	}
	// One round (a quick run), far below the goal: too few to judge.
	setRuns(all, podDir, 100)
	setRuns(all, fsRunc, 50)
	if got := verdicts(all, k, metrics[0]); !strings.HasPrefix(got[0], "Goal undecided: ") || !strings.Contains(got[0], "workloads all;") {
		t.Errorf("verdicts %q: want one round undecided", got)
	}
	// Twenty rounds, the same low outlier among them: the interval
	// leaves it out.
	var floor, vol []float64
	for i := 0; i < 20; i++ {
		floor = append(floor, 100)
		vol = append(vol, 98+float64(i%5))
	}
	vol[0] = 92
	setRuns(all, podDir, floor...)
	setRuns(all, fsRunc, vol...)
	if got := verdicts(all, k, metrics[0]); !strings.HasPrefix(got[0], "Goal met: ") || !strings.Contains(got[0], "96% interval") {
		t.Errorf("verdicts %q: want the goal met at 96%%", got)
	}
}

// TestTargetsKeepTheNodesOrder: -targets picks targets, the node's order
// stays, and without it every target runs.
func TestTargetsKeepTheNodesOrder(t *testing.T) {
	b := &bench{node: hostNode{}, only: []string{fsRunc, podDir}}
	if got, want := b.targets(), []string{podDir, fsRunc}; !slices.Equal(got, want) {
		t.Errorf("targets() = %v, want %v", got, want)
	}
	if got := (&bench{node: hostNode{}}).targets(); !slices.Equal(got, hostNode{}.targets()) {
		t.Errorf("targets() = %v, want all of %v", got, hostNode{}.targets())
	}
}

// TestResultsLeaveOutAKindWhoseFloorDidNotRun: a run of the filesystem
// targets alone makes the filesystem results and no block ones.
func TestResultsLeaveOutAKindWhoseFloorDidNotRun(t *testing.T) {
	all := runs{}
	setRuns(all, podDir, 100)
	setRuns(all, fsRunc, 99)
	got := buildResults(all, "", "", nil)
	if len(got) != len(metrics) {
		t.Fatalf("%d results, want %d (filesystem only)", len(got), len(metrics))
	}
	for _, r := range got {
		if !strings.HasPrefix(r.Name, "datapath-filesystem-") || len(r.Series) != 2 {
			t.Errorf("result %s with %d series: want a filesystem one with its floor and volume", r.Name, len(r.Series))
		}
		if err := r.Validate(); err != nil {
			t.Errorf("result %s: %v", r.Name, err)
		}
	}
	if got := buildResults(all, "vm", "many", nil)[0]; got.Name != "datapath-vm-many-filesystem-iops" || !strings.HasSuffix(got.Title, " on the vm node (many): IOPS") {
		t.Errorf("labelled result %q, %q: want the node's and the label's name in both", got.Name, got.Title)
	}
}

// TestRoundOrderAlternates: odd rounds run the targets in order, even
// rounds reversed, and the caller's list stays as it was.
func TestRoundOrderAlternates(t *testing.T) {
	ts := []string{podDir, fsRunc, podVolFile}
	if got := roundOrder(ts, 1); !slices.Equal(got, ts) {
		t.Errorf("round 1: %v, want %v", got, ts)
	}
	if got, want := roundOrder(ts, 2), []string{podVolFile, fsRunc, podDir}; !slices.Equal(got, want) {
		t.Errorf("round 2: %v, want %v", got, want)
	}
	if !slices.Equal(ts, []string{podDir, fsRunc, podVolFile}) {
		t.Errorf("roundOrder changed its argument: %v", ts)
	}
}
