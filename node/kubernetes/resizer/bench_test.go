package resizer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
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
	e.measureResizes(b, func(name string) (*corev1.PersistentVolumeClaim, func() (uint64, error)) {
		e.CreateClaim(controllertest.Claim{Name: name, Size: "4Mi", Mode: corev1.PersistentVolumeBlock})
		pvc, _ := e.WaitBound(name)
		return pvc, e.attach(ownership.VolumeIDFor(pvc.UID), false).Size
	})
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
	e.measureResizes(b, func(name string) (*corev1.PersistentVolumeClaim, func() (uint64, error)) {
		e.CreateClaim(controllertest.Claim{Name: name, Size: "4Mi"})
		pvc, _ := e.WaitBound(name)
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
		// Before the first patch statfs must already show the volume, not
		// its filesystem: otherwise the resizes would time the wrong thing.
		if got, err := size(); err != nil || got != 4<<20 {
			b.Fatalf("statfs of the new 4Mi volume shows %d bytes (%v): its quota is not what a process sees", got, err)
		}
		return pvc, size
	})
}

// resizesPerOp is how many times measureResizes grows each op's claim. The
// kube-controller-manager's Event recorder passes 25 Events of one type
// about one object and then one in 5 minutes (client-go's spam filter), so
// a claim takes fewer resizes than that for the baseline to be seen on each.
const resizesPerOp = 20

// measureResizes grows, in each op, a new 4 MiB claim that volume creates
// and names (outside the timer), resizesPerOp times by 4 MiB. It measures
// the time from each patch until size reports the new size and until the
// kube-controller-manager's ExternalExpanding Event about the patch
// arrives, and then waits for the resize to finish. It reports the metrics
// described above, and fails when either never comes.
func (e *env) measureResizes(b *testing.B, volume func(name string) (*corev1.PersistentVolumeClaim, func() (uint64, error))) {
	var visible, react []time.Duration
	e.awaitExpander(b)
	b.ResetTimer()
	for op := range b.N {
		b.StopTimer()
		pvc, size := volume(fmt.Sprintf("bench-%d", op))
		b.StartTimer()
		v, r := e.resizeOp(b, pvc, size)
		visible, react = append(visible, v...), append(react, r...)
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

// probeDriver is a CSI driver nobody serves. A claim of its volume, once
// grown, needs a resize for as long as it lives, so the
// kube-controller-manager says so whenever its expand controller looks.
const probeDriver = "kcm-probe.invalid"

// awaitExpander returns once the kube-controller-manager's expand
// controller runs. Its ExternalExpanding Event is measureResizes' floor,
// and it reports none for a claim whose resize Plinth finished before it
// looked: in the kernel-test VM the controller starts about 40 s after
// the API server is ready, when the first resize had long ended. So a
// claim bound to a volume of probeDriver grows, and this waits for the
// controller's Event about it.
func (e *env) awaitExpander(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	name := "kcm-probe-" + e.NS // the class and the PV are cluster-wide
	const claim = "kcm-probe"
	e.CreateClassFor(probeDriver, name, corev1.PersistentVolumeReclaimRetain, nil)
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity: size, AccessModes: rwo, StorageClassName: name,
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		ClaimRef:                      &corev1.ObjectReference{Namespace: e.NS, Name: claim},
		PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: probeDriver, VolumeHandle: name}},
	}}
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the probe's PV: %v", err)
	}
	b.Cleanup(func() { _ = e.Client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}) })
	// Bound to its PV from the start, the claim binds although the class
	// waits for a first consumer; none of our driver's annotations, so no
	// provisioner looks at it.
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: e.NS}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: rwo, StorageClassName: &name, VolumeName: name,
		Resources: corev1.VolumeResourceRequirements{Requests: size},
	}}
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the probe's claim: %v", err)
	}
	e.WaitBoundWithin(claim, 3*time.Minute)
	e.mustRequest(claim, "2Mi")
	controllertest.Eventually(b, 3*time.Minute, "the kube-controller-manager's ExternalExpanding Event about the probe claim", func() (bool, error) {
		evs, err := e.Client.CoreV1().Events(e.NS).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": claim, "reason": "ExternalExpanding"}.AsSelector().String(),
		})
		return err == nil && len(evs.Items) > 0, err
	})
}

// resizeOp is one op of measureResizes on claim pvc, of 4 MiB: for each of
// its resizes, the time until the new size was visible and until the
// kube-controller-manager's Event came.
func (e *env) resizeOp(b *testing.B, pvc *corev1.PersistentVolumeClaim, size func() (uint64, error)) (visible, react []time.Duration) {
	kcm, err := e.Client.CoreV1().Events(e.NS).Watch(context.Background(), metav1.ListOptions{
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

	mi := int64(4)
	for range resizesPerOp {
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
				b.Fatalf("%s still shows %d bytes 30 s after the patch to %d", pvc.Name, got, want)
			}
			time.Sleep(time.Millisecond)
		}
		visible = append(visible, time.Since(start))
		select {
		case at := <-kcmSeen:
			react = append(react, at.Sub(start))
		case <-time.After(30 * time.Second):
			b.Fatalf("no ExternalExpanding Event from the kube-controller-manager within 30 s of resize %d of %s", len(react)+1, pvc.Name)
		}
		e.waitResized(pvc.Name, fmt.Sprintf("%dMi", mi), 30*time.Second)
	}
	return visible, react
}

// quantiles returns the median and the 90th percentile of ds, in ms.
func quantiles(ds []time.Duration) (median, p90 float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(s[len(s)/2]), ms(s[len(s)*9/10])
}
