package csi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo/mounttest"
)

func TestPublishFilesystem(t *testing.T) {
	e := newEnv(t, "")
	e.create("fs", volume.Filesystem, 8*MiB)
	_, source, _ := e.volumes.Locate(context.Background(), "fs")
	rw, ro := e.target("rw"), e.target("ro")

	if err := e.publish("fs", rw, volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rw, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("writing through the read-write publication: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(source, "hello")); err != nil || string(b) != "hi" {
		t.Errorf("file written at the target is not in the volume: %q, %v", b, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rw, &st); err != nil || st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
		t.Errorf("publication flags %#x, %v: want nosuid and nodev", st.Flags, err)
	}
	// A retry with the same arguments: success, and still one mount.
	if err := e.publish("fs", rw, volume.Filesystem, false); err != nil {
		t.Fatalf("repeated publish: %v", err)
	}
	if n := mounttest.Count(t, rw); n != 1 {
		t.Errorf("%d mounts at the target after a repeated publish, want 1", n)
	}
	// The same target with other arguments, or another volume there.
	wantCode(t, "publish read-only over a read-write publication", e.publish("fs", rw, volume.Filesystem, true), codes.AlreadyExists)
	e.create("other", volume.Filesystem, MiB)
	wantCode(t, "publish another volume at the same target", e.publish("other", rw, volume.Filesystem, false), codes.AlreadyExists)
	wantCode(t, "publish the volume at the same target with block access", e.publish("fs", rw, volume.Block, false), codes.AlreadyExists)
	wantCode(t, "publish a filesystem volume as block", e.publish("fs", e.target("blk"), volume.Block, false), codes.FailedPrecondition)

	// Read-only really is read-only (the CSI flag, not only the
	// container's mount).
	if err := e.publish("fs", ro, volume.Filesystem, true); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(ro, "nope"), nil, 0o644)
	if !isErrno(err, unix.EROFS) {
		t.Errorf("creating a file in the read-only publication: %v, want EROFS", err)
	}
	if f, err := os.OpenFile(filepath.Join(ro, "hello"), os.O_WRONLY, 0); !isErrno(err, unix.EROFS) {
		if f != nil {
			f.Close()
		}
		t.Errorf("opening a file for writing in the read-only publication: %v, want EROFS", err)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "hello")); err != nil || string(b) != "hi" {
		t.Errorf("reading through the read-only publication: %q, %v", b, err)
	}

	for _, tg := range []string{rw, ro} {
		if err := e.unpublish("fs", tg); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(tg); !os.IsNotExist(err) {
			t.Errorf("target %s still exists after unpublish (%v)", tg, err)
		}
		if err := e.unpublish("fs", tg); err != nil {
			t.Errorf("repeated unpublish: %v", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(source, "hello")); err != nil || string(b) != "hi" {
		t.Errorf("volume data after unpublish: %q, %v", b, err)
	}
}

func TestPublishBlock(t *testing.T) {
	e := newEnv(t, "")
	e.create("blk", volume.Block, 4*MiB)
	_, image, _ := e.volumes.Locate(context.Background(), "blk")
	rw, ro := e.target("rw"), e.target("ro")
	if err := e.publish("blk", rw, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	p := e.srv.store.get(rw)
	var st unix.Stat_t
	if err := unix.Lstat(rw, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != loop.Major || st.Rdev != p.Loop.Rdev {
		t.Fatalf("target is not the recorded loop device node: %+v, %v (record %+v)", st, err, p.Loop)
	}
	d, err := loop.Open(rw)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := d.Size()
	flags, _ := d.Flags()
	d.Close()
	// Direct I/O is asked for always; the kernel can only honour it when
	// the image's filesystem supports O_DIRECT (tmpfs before Linux 6.6
	// does not).
	wantDirect := true
	if f, err := os.OpenFile(image, os.O_RDONLY|unix.O_DIRECT, 0); err != nil {
		t.Logf("the image's filesystem refuses O_DIRECT (%v): the loop device runs buffered", err)
		wantDirect = false
	} else {
		f.Close()
	}
	if size != 4*MiB || flags.DirectIO != wantDirect || flags.ReadOnly {
		t.Errorf("loop device size %d flags %+v, want %d, direct I/O %v, writable", size, flags, 4*MiB, wantDirect)
	}
	// The pod sees the block size the kernel picks, not one Plinth
	// imposes: a fixed 4096 would stop an XFS made on the volume with
	// 512-byte sectors from mounting, and would not close the loop
	// device's random-read gap either (docs/benchmarks.md).
	if got, want := logicalBlockSize(t, p.Loop.Number), kernelBlockSize(t, image, flags.DirectIO); got != want {
		t.Errorf("the volume's logical block size is %d, want the kernel's choice %d", got, want)
	}
	// Data written to the device lands in the image.
	f, err := os.OpenFile(rw, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("plinth!!"), 512)
	if _, err := f.WriteAt(want, MiB); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	img, _ := os.ReadFile(image)
	if !bytes.Equal(img[MiB:MiB+len(want)], want) {
		t.Errorf("data written to the device is not in the image")
	}
	if err := e.publish("blk", rw, volume.Block, false); err != nil {
		t.Fatalf("repeated publish: %v", err)
	}
	if again := e.srv.store.get(rw); again.Loop.Number != p.Loop.Number {
		t.Errorf("repeated publish made a second loop device (%d, was %d)", again.Loop.Number, p.Loop.Number)
	}

	// Read-only block: the device itself refuses writes.
	if err := e.publish("blk", ro, volume.Block, true); err != nil {
		t.Fatal(err)
	}
	wf, err := os.OpenFile(ro, os.O_WRONLY, 0)
	if err == nil {
		_, err = wf.Write(make([]byte, 4096))
		wf.Close()
	}
	if !isErrno(err, unix.EPERM, unix.EROFS, unix.EACCES) {
		t.Errorf("writing the read-only device: %v, want EPERM/EROFS/EACCES", err)
	}
	t.Logf("writing the read-only device: %v", err)
	rf, err := os.Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := rf.ReadAt(got, MiB); err != nil || !bytes.Equal(got, want) {
		t.Errorf("reading the read-only device: %v", err)
	}
	rf.Close()

	for _, tg := range []string{rw, ro} {
		rec := e.srv.store.get(tg)
		if err := e.unpublish("blk", tg); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(tg); !os.IsNotExist(err) {
			t.Errorf("device node %s still exists after unpublish (%v)", tg, err)
		}
		for _, b := range bindings(t) {
			if b.Number == rec.Loop.Number && strings.Contains(b.Backing, image) {
				t.Errorf("loop device %d still bound to the image after unpublish", rec.Loop.Number)
			}
		}
	}
}

func TestSingleWriterIsEnforced(t *testing.T) {
	e := newEnv(t, "")
	e.create("v", volume.Filesystem, MiB)
	rwop := csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	pub := func(target string, am csi.VolumeCapability_AccessMode_Mode) error {
		_, err := e.srv.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
			VolumeId: "v", TargetPath: target, VolumeCapability: capability(volume.Filesystem, am),
		})
		return err
	}
	if err := pub(e.target("a"), rwop); err != nil {
		t.Fatal(err)
	}
	if err := pub(e.target("a"), rwop); err != nil {
		t.Errorf("repeated single-writer publish: %v", err)
	}
	wantCode(t, "second single-writer publication", pub(e.target("b"), rwop), codes.FailedPrecondition)
	wantCode(t, "RWO publication next to a single-writer one", pub(e.target("b"), rwo), codes.FailedPrecondition)
	if _, err := os.Lstat(e.target("b")); !os.IsNotExist(err) {
		t.Errorf("refused publish left %s behind", e.target("b"))
	}
}

func TestConcurrentPublishOfOneVolume(t *testing.T) {
	e := newEnv(t, "")
	e.create("fs", volume.Filesystem, MiB)
	e.create("blk", volume.Block, MiB)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			mode, id := volume.Filesystem, "fs"
			if i%2 == 1 {
				mode, id = volume.Block, "blk"
			}
			// Every call for one target races the others; all must
			// succeed and leave exactly one publication.
			errs <- e.publish(id, e.target(id), mode, false)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := mounttest.Count(t, e.target("fs")); n != 1 {
		t.Errorf("%d mounts after concurrent publishes, want 1", n)
	}
	if n := mounttest.Mentions(t, e.target("fs")); n != 1 {
		t.Errorf("mountinfo lists the target %d times", n)
	}
	loops := 0
	_, image, _ := e.volumes.Locate(context.Background(), "blk")
	for _, b := range bindings(t) {
		if strings.HasPrefix(b.Backing, image) {
			loops++
		}
	}
	if loops != 1 {
		t.Errorf("%d loop devices over the image after concurrent publishes, want 1", loops)
	}
}

// TestPublishMountFlags: mount flags reach the mount, and a retry that
// asks for the same mount (flags in another order, repeated, or with the
// nosuid and nodev every publication has) succeeds, where other flags are
// ALREADY_EXISTS.
func TestPublishMountFlags(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("fs", volume.Filesystem, 8*MiB)
	target := e.target("flags")
	publish := func(flags ...string) error {
		c := capability(volume.Filesystem, rwo)
		c.GetMount().MountFlags = flags
		_, err := e.srv.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "fs", TargetPath: target, VolumeCapability: c})
		return err
	}
	if err := publish("noexec", "noatime"); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil || st.Flags&unix.ST_NOEXEC == 0 || st.Flags&unix.ST_NOATIME == 0 {
		t.Errorf("publication flags %#x, %v: want noexec and noatime", st.Flags, err)
	}
	for _, same := range [][]string{{"noatime", "noexec"}, {"noexec", "noatime", "noexec"}, {"nosuid", "noatime", "nodev", "noexec"}} {
		if err := publish(same...); err != nil {
			t.Errorf("retry with flags %q: %v", same, err)
		}
	}
	if n := mounttest.Count(t, target); n != 1 {
		t.Errorf("%d mounts at the target after the retries, want 1", n)
	}
	wantCode(t, "publish with other flags at the same target", publish("noexec"), codes.AlreadyExists)
	if err := e.unpublish("fs", target); err != nil {
		t.Fatal(err)
	}
}

// TestPublishBlockAtKubeletDevicePath: a block volume is published where
// the kubelet puts block volumes' device paths, below
// plugins/kubernetes.io/csi/ (the kubelet creates the parent directory).
func TestPublishBlockAtKubeletDevicePath(t *testing.T) {
	e := newEnv(t, "")
	e.create("blk", volume.Block, MiB)
	volumePlugin := e.root.Kubelet.Plugins.VolumePlugin()
	parent := filepath.Join(volumePlugin.FullPath(), "volumeDevices", "publish", "pvc-blk")
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(parent, "pod-uid")
	if err := e.publish("blk", target, volume.Block, false); err != nil {
		t.Fatalf("publishing at the kubelet's device path: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Errorf("target after publish: %+v, %v; want a block device node", st, err)
	}
	if err := e.unpublish("blk", target); err != nil {
		t.Fatal(err)
	}
}

// logicalBlockSize reads /dev/loopN's logical block size from sysfs.
func logicalBlockSize(t *testing.T, n int) uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/queue/logical_block_size", n))
	if err != nil {
		t.Fatal(err)
	}
	size, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(size)
}

// kernelBlockSize is the logical block size the kernel gives a loop device
// configured with block size 0: 512, unless it runs direct I/O on an image
// whose filesystem needs larger aligned direct I/O (recent kernels match
// that alignment; older ones run buffered there instead).
func kernelBlockSize(t *testing.T, image string, direct bool) uint32 {
	t.Helper()
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, image, 0, unix.STATX_DIOALIGN, &st); err != nil {
		t.Fatal(err)
	}
	if direct && st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align > 512 {
		return st.Dio_offset_align
	}
	return 512
}
