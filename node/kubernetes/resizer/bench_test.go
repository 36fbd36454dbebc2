package resizer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"source.plinth.dev/node/kubernetes/internal/controllertest"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// BenchmarkResizeBlock measures what a user waits for: the time from the
// patch of a block claim's request to the new size being visible to a
// process holding the published device (BLKGETSIZE64), over 20 resizes per
// op. Beside it, measured on the same patches, is the time the
// kube-controller-manager alone takes to react to a patch (its
// ExternalExpanding Event reaching a watcher): the floor set by the control
// plane's own informers. Reported: medians and 90th percentiles in ms, and
// the ratio of the medians.
//
// Filesystem volumes are not measured here: on this host quotas are not
// enforced, so statfs does not show a volume's size.
func BenchmarkResizeBlock(b *testing.B) {
	e := &env{controllertest.NewEnv(b, true)}
	e.start()
	e.CreateClaim(controllertest.Claim{Name: "bench", Size: "4Mi", Mode: corev1.PersistentVolumeBlock})
	pvc, _ := e.WaitBound("bench")
	dev := e.attach(ownership.VolumeIDFor(pvc.UID), false)
	ctx := context.Background()
	kcm, err := e.Client.CoreV1().Events(e.NS).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.uid": string(pvc.UID), "reason": "ExternalExpanding"}.AsSelector().String(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer kcm.Stop()
	kcmSeen := make(chan time.Time, 64)
	go func() {
		for ev := range kcm.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				kcmSeen <- time.Now()
			}
		}
	}()

	var visible, react []time.Duration
	size := int64(4)
	b.ResetTimer()
	for range b.N {
		for range 20 {
			size += 4
			want := uint64(size << 20)
			// Drain reactions to earlier patches.
			for len(kcmSeen) > 0 {
				<-kcmSeen
			}
			start := time.Now()
			e.mustRequest("bench", fmt.Sprintf("%dMi", size))
			for {
				got, err := dev.Size()
				if err != nil {
					b.Fatal(err)
				}
				if got == want {
					break
				}
				if time.Since(start) > 30*time.Second {
					b.Fatalf("device still %d bytes 30 s after the patch to %d", got, want)
				}
				time.Sleep(time.Millisecond)
			}
			visible = append(visible, time.Since(start))
			select {
			case at := <-kcmSeen:
				react = append(react, at.Sub(start))
			case <-time.After(30 * time.Second):
				b.Fatal("no ExternalExpanding Event from the kube-controller-manager within 30 s")
			}
			e.waitResized("bench", fmt.Sprintf("%dMi", size), 30*time.Second)
		}
	}
	b.StopTimer()
	vm, v90 := quantiles(visible)
	km, k90 := quantiles(react)
	b.ReportMetric(vm, "ms-visible-median")
	b.ReportMetric(v90, "ms-visible-p90")
	b.ReportMetric(km, "ms-kcm-event-median")
	b.ReportMetric(k90, "ms-kcm-event-p90")
	b.ReportMetric(vm/km, "ratio-visible/kcm")
}

// quantiles returns the median and the 90th percentile of ds, in ms.
func quantiles(ds []time.Duration) (median, p90 float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(s[len(s)/2]), ms(s[len(s)*9/10])
}
