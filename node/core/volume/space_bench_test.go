package volume

import (
	"context"
	"fmt"
	"testing"

	"source.plinth.dev/test/volumetest"
)

// BenchmarkCreateAmong measures a Create of a 1 MiB filesystem volume
// beside 1,000 and 10,000 existing volumes (half of them filesystem
// volumes, half block volumes of 1 MiB), on a loop-mounted XFS on the
// host (quotas not enforced), against one exact measurement of the
// promise (Space: a stat, an xattr read and, where quotas are enforced,
// a quota read per volume), which each Create paid before the promise
// ledger (ledger.go). The goal: flat in the number of volumes. Each
// created volume is deleted again outside the timer, so the number stays
// put.
//
// Sub-benchmarks are volumes=N/impl=create|measure (the baseline), as
// build/scripts/bench.sh and bench/report read them.
//
//	go test -run '^$' -bench CreateAmong -count 3 ./node/core/volume
func BenchmarkCreateAmong(b *testing.B) {
	ctx := context.Background()
	d, qerr := volumetest.DataDir(b, volumetest.LoopXFS(b, 16<<30))
	m, err := New(Config{Data: d, QuotaError: qerr, AllowUnenforced: true})
	if err != nil {
		b.Fatal(err)
	}
	made := 0
	for _, n := range []int{1000, 10000} {
		for ; made < n; made++ {
			mode := Filesystem
			if made%2 == 1 {
				mode = Block
			}
			if _, err := m.Create(ctx, fmt.Sprintf("vol-%05d", made), mode, MiB); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("volumes=%d/impl=create", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("new-%d", i)
				if _, err := m.Create(ctx, id, Filesystem, MiB); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := m.Delete(ctx, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("volumes=%d/impl=measure", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := m.Space(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
