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
	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/ktest"
)

// BenchmarkPublishUnpublishBlock measures one NodePublishVolume plus one
// NodeUnpublishVolume of a block volume (loop device, record, device node,
// and back) while 0 or 200 other block volumes are published. Goal: under
// 5 ms per pair, and flat in the number of other publications (make bench
// prints the ratio published=200 / published=0).
//
// The baseline, impl=floor, is the kernel work a block publication cannot
// do without, done directly on the same image: open it, bind a loop device
// with direct I/O, make the device node at the target; and back: remove
// the node, reopen the device (unpublish is another call) and detach it.
// Everything the plugin adds is what makes it safe: the per-volume and
// per-target locks, the checks of the request and of what is at the
// target, and the fsync'ed state record that lets a restarted plugin find
// and verify its devices. The ratio plugin/floor is the price of that
// safety, which a faster machine or kernel does not hide the way an
// absolute figure would.
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
			target := e.target("bench")
			b.Run("impl=plugin", func(b *testing.B) {
				pub := &csi.NodePublishVolumeRequest{VolumeId: "bench", TargetPath: target, VolumeCapability: capability(volume.Block, rwo)}
				unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "bench", TargetPath: target}
				for b.Loop() {
					if _, err := e.srv.NodePublishVolume(ctx, pub); err != nil {
						b.Fatal(err)
					}
					if _, err := e.srv.NodeUnpublishVolume(ctx, unpub); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("impl=floor", func(b *testing.B) {
				_, image, err := e.volumes.Locate(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					dev := floorPublish(b, image, target)
					floorUnpublish(b, target, dev)
				}
			})
		})
	}
}

// floorPublish is the baseline's publish: a loop device over image and its
// node at target, nothing else. It returns the device's path, which the
// floor keeps in memory where the plugin keeps a record on disk.
func floorPublish(b *testing.B, image, target string) (dev string) {
	f, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	d, err := loop.Create(f, loop.Options{DirectIO: true})
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	if err := unix.Mknod(target, unix.S_IFBLK|0o660, int(d.Dev())); err != nil {
		b.Fatal(err)
	}
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	return d.Path()
}

// floorUnpublish is the baseline's unpublish: remove the node at target
// and detach the loop device dev.
func floorUnpublish(b *testing.B, target, dev string) {
	if err := unix.Unlink(target); err != nil {
		b.Fatal(err)
	}
	d, err := loop.Open(dev)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Detach(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkVolumeStats compares NodeGetVolumeStats on a filesystem volume
// holding 100,000 files (impl=quota: one quotactl) with walking the volume
// to add up its usage (impl=walk), which is what the kubelet does for a
// volume without a CSI stats source, and the quota audit's walk over the
// same volume (impl=audit). It needs project quotas, so it runs
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
	// The quota audit (volumehealth's audit loop) walks every volume too,
	// with a few more system calls a file than the kubelet's walk;
	// unpaced here, to measure the walk itself (the node paces it to
	// 2,000 files a second).
	b.Run("impl=audit", func(b *testing.B) {
		for b.Loop() {
			r, err := e.volumes.RestoreProjectIDs(ctx, "stats", nil)
			if err != nil || r.Checked < files || r.Strays != 0 || r.Failed != 0 {
				b.Fatalf("audit of the volume: %+v (%v)", r, err)
			}
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
