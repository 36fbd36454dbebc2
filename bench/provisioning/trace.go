package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Stages of one pod and its claim, in the order they happen, as the
// benchmark's watches see them. The time of a stage is when the benchmark
// first saw it, not the objects' own timestamps (whole seconds only).
type stage int

const (
	created   stage = iota // the create call of the claim (or pod) returned
	selected               // the scheduler put its selected-node annotation on the claim
	annotated              // the PV controller named the provisioner on the claim
	pvCreated              // a PV with claimRef to the claim appeared
	bound                  // the claim's phase is Bound
	scheduled              // the pod has a node
	running                // the pod's phase is Running
	pvGone                 // the claim's PV was deleted
	podGone                // the pod was deleted
	numStages
)

var stageNames = [numStages]string{"created", "node selected", "provisioner named", "PV created", "claim Bound", "pod scheduled", "pod Running", "PV gone", "pod gone"}

// trace is what one measurement saw of its n claims and pods, named
// <prefix><i>. Watch handlers record into it from their goroutines.
type trace struct {
	prefix string
	n      int
	start  time.Time

	mu    sync.Mutex
	seen  map[string]*[numStages]time.Duration // by item name; zero: not yet
	count [numStages]int
}

func newTrace(prefix string, n int) *trace {
	return &trace{prefix: prefix, n: n, start: time.Now(), seen: map[string]*[numStages]time.Duration{}}
}

// mark records that item name reached st, once.
func (t *trace) mark(name string, st stage) {
	if !strings.HasPrefix(name, t.prefix) {
		return
	}
	at := time.Since(t.start)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.seen[name]
	if s == nil {
		s = new([numStages]time.Duration)
		t.seen[name] = s
	}
	if s[st] == 0 {
		s[st] = at
		t.count[st]++
	}
}

// reached returns how many items reached st.
func (t *trace) reached(st stage) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.count[st]
}

// last returns when the last item reached st (all n must have).
func (t *trace) last(st stage) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var m time.Duration
	for _, s := range t.seen {
		m = max(m, s[st])
	}
	return m
}

// between returns, over all items that reached both, the median time from
// stage a to stage b.
func (t *trace) between(a, b stage) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var d []time.Duration
	for _, s := range t.seen {
		if s[a] != 0 && s[b] != 0 {
			d = append(d, s[b]-s[a])
		}
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// summary says when the stages were complete and the median time spent
// between consecutive stages of one pod, for the stages this series has.
func (t *trace) summary(stages []stage) string {
	var b strings.Builder
	for i, st := range stages {
		fmt.Fprintf(&b, "%s all by %.1fs", stageNames[st], t.last(st).Seconds())
		if i > 0 {
			fmt.Fprintf(&b, " (median %.2fs after %s)", t.between(stages[i-1], st).Seconds(), stageNames[stages[i-1]])
		}
		if i < len(stages)-1 {
			b.WriteString("; ")
		}
	}
	return b.String()
}

// observePod records a pod's stages.
func (t *trace) observePod(p *corev1.Pod) {
	if p.Spec.NodeName != "" {
		t.mark(p.Name, scheduled)
	}
	if p.Status.Phase == corev1.PodRunning {
		t.mark(p.Name, running)
	}
}

// The claim annotations of the scheduler (which node provisions) and of
// the PV controller (which provisioner; what external provisioners wait
// for).
const (
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
)

// observeClaim records a claim's stages.
func (t *trace) observeClaim(c *corev1.PersistentVolumeClaim) {
	if c.Annotations[annSelectedNode] != "" {
		t.mark(c.Name, selected)
	}
	if c.Annotations[annStorageProvisioner] != "" {
		t.mark(c.Name, annotated)
	}
	if c.Status.Phase == corev1.ClaimBound {
		t.mark(c.Name, bound)
	}
}

// observePV records the creation of a PV for one of our claims.
func (t *trace) observePV(pv *corev1.PersistentVolume, ns string) {
	if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == ns {
		t.mark(ref.Name, pvCreated)
	}
}

// observePVGone records the deletion of a PV of one of our claims.
func (t *trace) observePVGone(pv *corev1.PersistentVolume, ns string) {
	if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == ns {
		t.mark(ref.Name, pvGone)
	}
}
