package main

import (
	"strings"
	"time"

	"source.plinth.dev/bench/scrape"
	"source.plinth.dev/pkg/loop"
)

// The series: the kubelet Plinth's node runs, and the one most clusters
// run (the baseline).
const (
	seriesPatched  = "patched"
	seriesUpstream = "upstream"
)

// plan is what one kubelet's cluster goes through.
type plan struct {
	// densities are the background levels, ascending; the background only
	// grows, so one cluster serves them all.
	densities []int
	// perLevel is K, the new pods timed at each level.
	perLevel int
}

// maxPods is the kubelet's maxPods: every pod the plan creates (the new
// pods stay) and room to spare. The launched node's pod network is a /24,
// so it cannot go much past 250 anyway.
func (p plan) maxPods() int {
	return p.pods() + 20
}

// pods is how many block pods a cluster ends with.
func (p plan) pods() int {
	n := 0
	for _, d := range p.densities {
		n = max(n, d) + p.perLevel
	}
	return n
}

// expected is the wall time of the whole run for n kubelets, from what one
// full run took on the 2-core development machine: a cluster's start and
// stop, each background pod's start and teardown, each timed pod.
func (p plan) expected(n int) time.Duration {
	perCluster := 25*time.Second +
		time.Duration(p.pods())*600*time.Millisecond +
		time.Duration(p.perLevel*len(p.densities))*2500*time.Millisecond
	return time.Duration(n) * perCluster
}

// level is what one kubelet measured at one background density.
type level struct {
	// density is D, the block volumes published before the first new pod.
	density int
	// toRunning is each new pod's time from its creation to Running,
	// onNode the part from its binding to the node (the
	// informer saw spec.nodeName) to Running: the kubelet's share.
	toRunning, onNode []time.Duration
	// mapVolume is each new pod's map_volume operation in the kubelet
	// (its storage_operation_duration_seconds): the CSI publish and,
	// upstream, the losetup pseudo-lock, without the kubelet's polling
	// around it.
	mapVolume []time.Duration
	// background is how long topping the background up to density took.
	background time.Duration
	// loops are the loop devices bound when the new pods were started.
	loops loopCount
}

// kubeletRun is one kubelet's cluster.
type kubeletRun struct {
	series  string
	version string
	levels  []level
	// teardown is the time from deleting every block pod to the last one
	// gone; loopsAfter the loop devices left then.
	teardown   time.Duration
	loopsAfter loopCount
	// unmap are the kubelet's unmap_volume operations during the teardown.
	unmap scrape.Totals
}

// loopCount sorts the loop devices that serve the cluster's block volumes.
type loopCount struct {
	// volumes are bound to Plinth's volume images (below the data
	// directory), one per published block volume.
	volumes int
	// pseudoLocks are bound to a device file the kubelet maps (below its
	// root directory) or to a device node under /dev: the upstream
	// kubelet's losetup "locks" on block volumes.
	pseudoLocks int
}

func (l loopCount) total() int { return l.volumes + l.pseudoLocks }

// countLoops sorts bindings by what they serve. dataDir and kubeletDir are
// as the kernel names paths (absolute, without symlinks); kubeletDir is
// below dataDir. Loop devices of anything else on the host (the data
// filesystem's own image is outside dataDir) are not counted.
func countLoops(bindings []loop.Binding, dataDir, kubeletDir string) loopCount {
	var c loopCount
	for _, b := range bindings {
		switch {
		case strings.HasPrefix(b.Backing, kubeletDir+"/") || strings.HasPrefix(b.Backing, "/dev/"):
			c.pseudoLocks++
		case strings.HasPrefix(b.Backing, dataDir+"/"):
			c.volumes++
		}
	}
	return c
}
