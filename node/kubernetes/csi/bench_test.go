package csi

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"source.plinth.dev/build/ktest"
	"source.plinth.dev/node/kubernetes/volume"
)

// BenchmarkPublishUnpublishBlock measures one NodePublishVolume plus one
// NodeUnpublishVolume of a block volume (loop device, record, device node,
// and back) while 0 or 200 other block volumes are published. Goal: under
// 5 ms per pair, and flat in the number of other publications.
func BenchmarkPublishUnpublishBlock(b *testing.B) {
	for _, others := range []int{0, 200} {
		b.Run(fmt.Sprintf("published=%d", others), func(b *testing.B) {
			e := newEnv(b, "")
			ctx := context.Background()
			for i := range others {
				id := fmt.Sprintf("other-%d", i)
				e.create(id, volume.Block, MiB)
				if err := e.publish(id, e.target(id), volume.Block, false); err != nil {
					b.Fatal(err)
				}
			}
			e.create("bench", volume.Block, MiB)
			pub := &csi.NodePublishVolumeRequest{VolumeId: "bench", TargetPath: e.target("bench"), VolumeCapability: capability(volume.Block, rwo)}
			unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "bench", TargetPath: e.target("bench")}
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.srv.NodePublishVolume(ctx, pub); err != nil {
					b.Fatal(err)
				}
				if _, err := e.srv.NodeUnpublishVolume(ctx, unpub); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVolumeStats compares NodeGetVolumeStats on a filesystem volume
// holding 100,000 files (impl=quota: one quotactl) with walking the volume
// to add up its usage (impl=walk), which is what the kubelet does for a
// volume without a CSI stats source. It needs project quotas, so it runs
// in the kernel VM (make bench); on the host it is skipped, because there
// the plugin has no usage figure to read and the comparison would be
// meaningless. Goal: quota at least 1000x faster.
func BenchmarkVolumeStats(b *testing.B) {
	ktest.RequireVM(b)
	e := newEnv(b, filepath.Join(ktest.TempDir(b, "xfs"), "data"))
	if !e.volumes.CapacityEnforced() {
		b.Fatalf("quotas not enforced: %v", e.volumes.QuotaError)
	}
	ctx := context.Background()
	const files = 100_000
	// 400 MiB gives 102,400 inodes at one per 4 KiB: room for the files
	// and their directories.
	e.create("stats", volume.Filesystem, 400*MiB)
	target := e.target("stats")
	if err := e.publish("stats", target, volume.Filesystem, false); err != nil {
		b.Fatal(err)
	}
	for d := range files / 1000 {
		dir := filepath.Join(target, fmt.Sprint(d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 1000 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	req := &csi.NodeGetVolumeStatsRequest{VolumeId: "stats", VolumePath: target}
	resp, err := e.srv.NodeGetVolumeStats(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	walkBytes, walkInodes := walkUsage(b, target)
	if i := usage(resp, csi.VolumeUsage_INODES); i == nil || i.Used < files || i.Used != walkInodes {
		b.Fatalf("quota counts %v inodes, the walk %d", i, walkInodes)
	}
	b.Logf("quota: %d bytes used; walk: %d bytes in %d inodes", usage(resp, csi.VolumeUsage_BYTES).Used, walkBytes, walkInodes)
	b.Run("impl=quota", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.srv.NodeGetVolumeStats(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=walk", func(b *testing.B) {
		for b.Loop() {
			walkUsage(b, target)
		}
	})
}

// walkUsage adds up the blocks and inodes below dir the way the kubelet's
// du-like fallback does: lstat every entry, count each inode once.
func walkUsage(b *testing.B, dir string) (bytes, inodes int64) {
	seen := make(map[uint64]bool)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		inodes++
		bytes += st.Blocks * 512
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return bytes, inodes
}
