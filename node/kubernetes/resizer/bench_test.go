package resizer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"source.plinth.dev/node/kubernetes/internal/controllertest"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// Both resize benchmarks measure what a user waits for: the time from the
// patch of a claim's request to the new size being visible to a process
// using the volume, over 20 resizes per op. Beside it, measured on the same
// patches, is the time the kube-controller-manager alone takes to react to
// a patch (its ExternalExpanding Event reaching a watcher): the floor set
// by the control plane's own informers. Reported: medians and 90th
// percentiles in ms, and the ratio of the medians (measureResizes).

// BenchmarkResizeBlock: a block claim, its size as a process holding the
// published device sees it (BLKGETSIZE64). Runs on the host.
func BenchmarkResizeBlock(b *testing.B) {
	e := &env{controllertest.NewEnv(b, true)}
	e.start()
	e.CreateClaim(controllertest.Claim{Name: "bench", Size: "4Mi", Mode: corev1.PersistentVolumeBlock})
	pvc, _ := e.WaitBound("bench")
	dev := e.attach(ownership.VolumeIDFor(pvc.UID), false)
	e.measureResizes(b, pvc, 4, dev.Size)
}

// BenchmarkResizeFilesystem: a filesystem claim, its size as a process in
// the volume sees it (statfs of the volume's directory, which a pod sees
// through a bind mount of it). statfs shows a volume's size only where its
// project quota is enforced (XFS limits f_blocks to the project's limit),
// so this runs in the kernel-test VM (bench.sh's vm entry); elsewhere it
// fails rather than measure the size of the whole data filesystem.
func BenchmarkResizeFilesystem(b *testing.B) {
	e := &env{controllertest.NewEnv(b, false)}
	if !e.Vols.CapacityEnforced() {
		b.Fatalf("statfs shows a filesystem volume's size only under enforced project quotas, and %s has none (%v): run this in the kernel-test VM, as build/scripts/bench.sh does", e.Dir, e.Vols.QuotaError)
	}
	e.start()
	e.CreateClaim(controllertest.Claim{Name: "bench", Size: "4Mi"})
	pvc, _ := e.WaitBound("bench")
	_, dir, err := e.Vols.Locate(context.Background(), ownership.VolumeIDFor(pvc.UID))
	if err != nil {
		b.Fatal(err)
	}
	size := func() (uint64, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		return st.Blocks * uint64(st.Bsize), nil
	}
	// Before the first patch statfs must already show the volume, not its
	// filesystem: otherwise the loop below would time the wrong thing.
	if got, err := size(); err != nil || got != 4<<20 {
		b.Fatalf("statfs of the new 4Mi volume shows %d bytes (%v): its quota is not what a process sees", got, err)
	}
	e.measureResizes(b, pvc, 4, size)
}

// measureResizes grows claim pvc, now of fromMi MiB, 20 times per op by
// 4 MiB, each time measuring the time from the patch until size reports the
// new size and until the kube-controller-manager's ExternalExpanding Event
// about the patch arrives, and then waiting for the resize to finish. It
// reports the metrics described above, and fails when either never comes.
func (e *env) measureResizes(b *testing.B, pvc *corev1.PersistentVolumeClaim, fromMi int64, size func() (uint64, error)) {
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
	mi := fromMi
	b.ResetTimer()
	for range b.N {
		for range 20 {
			mi += 4
			want := uint64(mi << 20)
			// Drain reactions to earlier patches.
			for len(kcmSeen) > 0 {
				<-kcmSeen
			}
			start := time.Now()
			e.mustRequest(pvc.Name, fmt.Sprintf("%dMi", mi))
			for {
				got, err := size()
				if err != nil {
					b.Fatal(err)
				}
				if got == want {
					break
				}
				if time.Since(start) > 30*time.Second {
					b.Fatalf("the volume still shows %d bytes 30 s after the patch to %d", got, want)
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
			e.waitResized(pvc.Name, fmt.Sprintf("%dMi", mi), 30*time.Second)
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
