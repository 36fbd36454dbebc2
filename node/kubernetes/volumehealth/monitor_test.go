package volumehealth

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/pkg/logtree"
)

// TestReportSendsEventsOnChangesOnly runs report, the monitor's pure step,
// through a volume's life: Events only when the condition changes.
func TestReportSendsEventsOnChangesOnly(t *testing.T) {
	r, rec, pv := testRound()
	healthy := Condition{}
	gone := Condition{Abnormal: true, Message: "gone"}
	detached := Condition{Abnormal: true, Message: "detached"}
	for _, step := range []struct {
		cond Condition
		want []string // Events sent, each for the claim and the PV
	}{
		{healthy, nil}, // first sight, healthy: nothing to say
		{healthy, nil},
		{gone, []string{"Warning " + ReasonAbnormal}},
		{gone, nil}, // still the same problem
		{detached, []string{"Warning " + ReasonAbnormal}},
		{healthy, []string{"Normal " + ReasonNormal}},
		{healthy, nil},
	} {
		r.report(pv, step.cond)
		var got []string
		for len(rec.Events) > 0 {
			ev := <-rec.Events
			f := strings.Fields(ev) // "Warning Reason message..."
			got = append(got, f[0]+" "+f[1])
		}
		var want []string
		for _, w := range step.want {
			want = append(want, w, w)
		}
		if !slices.Equal(got, want) {
			t.Errorf("after %+v: Events %q, want %q", step.cond, got, want)
		}
		if n, want := r.abnormal(), map[bool]int{true: 1}[step.cond.Abnormal]; n != want {
			t.Errorf("after %+v: %d volumes counted abnormal, want %d", step.cond, n, want)
		}
	}
	// A volume first seen abnormal (e.g. after a restart) is reported.
	r.last = map[string]Condition{}
	r.report(pv, gone)
	if n := len(rec.Events); n != 2 {
		t.Errorf("a volume abnormal at first sight sent %d Events, want 2 (claim and PV)", n)
	}
}

// testRound is a monitor round of driver "d" on node "n" that records its
// Events, and a bound PV "pv" of that driver for claim ns/c.
func testRound() (*round, *record.FakeRecorder, *corev1.PersistentVolume) {
	rec := record.NewFakeRecorder(100)
	r := &round{
		Monitor:  &Monitor{Config{Base: controller.Base{Driver: "d", NodeName: "n"}}},
		log:      logtree.New().LeveledFor("test"),
		recorder: rec,
		last:     map[string]Condition{},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "pv"}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "ns", Name: "c"},
		},
	}
	return r, rec, pv
}
