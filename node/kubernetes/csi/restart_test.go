package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo/mounttest"
)

// TestRestartKeepsPublications restarts the plugin (a new Server over the
// same directories, nothing kept in memory) and checks that publications
// are still served by the same mount and loop device, still answer stats,
// and can be unpublished by the new server.
func TestRestartKeepsPublications(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("fs", volume.Filesystem, MiB)
	e.create("blk", volume.Block, MiB)
	if err := e.publish("fs", e.target("fs"), volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	if err := e.publish("blk", e.target("blk"), volume.Block, true); err != nil {
		t.Fatal(err)
	}
	before := e.srv.store.get(e.target("blk")).Loop
	e.restart()
	after := e.srv.store.get(e.target("blk"))
	if after == nil || *after.Loop != *before {
		t.Fatalf("block publication after restart: %+v, want loop %+v", after, before)
	}
	if n := mounttest.Count(t, e.target("fs")); n != 1 {
		t.Errorf("%d mounts at the filesystem target after restart, want 1", n)
	}
	for _, id := range []string{"fs", "blk"} {
		resp, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: e.target(id)})
		if err != nil {
			t.Fatalf("stats of %s after restart: %v", id, err)
		}
		if c := legacyCondition(t, resp); c.abnormal {
			t.Errorf("%s abnormal after restart: %s", id, c.message)
		}
		if err := e.publish(id, e.target(id), map[string]volume.Mode{"fs": volume.Filesystem, "blk": volume.Block}[id], id == "blk"); err != nil {
			t.Errorf("repeated publish of %s after restart: %v", id, err)
		}
	}
	if n := mounttest.Count(t, e.target("fs")); n != 1 {
		t.Errorf("%d mounts after republish, want 1", n)
	}
}

// TestStaleLoopDeviceIsNeverTrusted frees a published block volume's loop
// device behind the plugin's back and binds a foreign file to the very same
// number (and so the same device number), as another program could while
// the node agent is down. On restart the plugin must notice that
// /dev/loopN now serves someone else, leave that device alone, remove the
// stale node at the target (a restarted container would be given it),
// refuse to publish the volume there again on another number (the pod
// holds loopN), report the publication broken, and keep the number
// reserved until the unpublish, which leaves the foreign device alone.
func TestStaleLoopDeviceIsNeverTrusted(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("blk", volume.Block, MiB)
	target := e.target("blk")
	if err := e.publish("blk", target, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	old := e.srv.store.get(target).Loop
	e.die()
	fd := takeNumber(t, old)
	// The stale node at the target now opens the foreign device: exactly
	// what the plugin must not trust.
	var stale unix.Stat_t
	if err := unix.Lstat(target, &stale); err != nil || stale.Rdev != fd.Dev() {
		t.Fatalf("target before restart: rdev %#x (%v), want the foreign device %#x", stale.Rdev, err, fd.Dev())
	}

	e.restart()
	now := e.srv.store.get(target)
	if now == nil || now.Loop == nil || *now.Loop != *old {
		t.Fatalf("publication after the restart: %+v, want it kept with loop %+v (reserved)", now, old)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the node at the target, naming the foreign device, survived the restart (%v)", err)
	}
	err := e.publish("blk", target, volume.Block, false)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "now serves another file") {
		t.Errorf("publish again over a number taken by a foreign file: %v, want FailedPrecondition", err)
	}
	if p := e.srv.store.get(target); p == nil || *p.Loop != *old {
		t.Errorf("the refused publish changed the record to %+v", p)
	}
	resp, err := e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "blk"})
	if err != nil || len(resp.GetVolumeHealth().GetHealthStatuses()) != 1 ||
		!strings.Contains(resp.GetVolumeHealth().GetHealthStatuses()[0].GetMessage(), "now serves another file") {
		t.Errorf("health of the publication: %v (%v), want it reported broken", resp, err)
	}
	if b, err := fd.BackingFile(); err != nil || !strings.HasSuffix(b, "foreign.img") {
		t.Errorf("foreign loop device now backs %q (%v), want it untouched", b, err)
	}
	if err := e.unpublish("blk", target); err != nil {
		t.Fatal(err)
	}
	if b, err := fd.BackingFile(); err != nil || !strings.HasSuffix(b, "foreign.img") {
		t.Errorf("unpublish touched the foreign loop device: %q, %v", b, err)
	}
	if p := e.srv.store.get(target); p != nil {
		t.Errorf("record left after the unpublish: %+v", p)
	}
}

// takeNumber frees the loop device rec names and binds a foreign file to
// that very number, returning the foreign device (removed at cleanup).
func takeNumber(t *testing.T, rec *loopRecord) *loop.Device {
	t.Helper()
	d, err := loop.Open("/dev/loop" + itoa(rec.Number))
	if err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(t.TempDir(), "foreign.img")
	if err := os.WriteFile(foreign, make([]byte, 2*MiB), 0o600); err != nil {
		t.Fatal(err)
	}
	ff, err := os.OpenFile(foreign, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	// Detach leaves /dev/loopN in place, unbound; the foreign file takes
	// exactly that number. (Another process could grab the free device
	// in between; then CreateAt fails with EBUSY rather than the test
	// testing nothing.)
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	fd, err := loop.CreateAt(rec.Number, ff, loop.Options{})
	if err != nil {
		t.Fatalf("binding the foreign file to the volume's old loop%d: %v", rec.Number, err)
	}
	t.Cleanup(func() { fd.Remove() })
	if fd.Number() != rec.Number || fd.Dev() != rec.Rdev {
		t.Fatalf("foreign file is on loop%d (dev %#x), want the volume's old loop%d (dev %#x)", fd.Number(), fd.Dev(), rec.Number, rec.Rdev)
	}
	return fd
}

// TestRebootDropsStalePublications simulates a reboot (new boot ID; the
// loop device is gone): the stale device node is removed, never trusted,
// the record dropped, and a new publish builds everything afresh.
func TestRebootDropsStalePublications(t *testing.T) {
	e := newEnv(t, "")
	e.create("blk", volume.Block, MiB)
	target := e.target("blk")
	if err := e.publish("blk", target, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	old := e.srv.store.get(target).Loop
	e.die()
	d, err := loop.Open("/dev/loop" + itoa(old.Number))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	e.boot = "boot-2"
	e.restart()
	if p := e.srv.store.get(target); p != nil {
		t.Errorf("record of the earlier boot survived: %+v", p)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("stale device node %s survived the reboot (%v)", target, err)
	}
	if err := e.publish("blk", target, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	if p := e.srv.store.get(target); p == nil || p.BootID != "boot-2" {
		t.Errorf("republished record %+v, want boot-2", p)
	}
}

// TestLeakedLoopDeviceIsRemoved attaches a loop device over a volume image
// without a record (a crash between attaching and recording) and checks
// that the next start frees it: no loop device is left serving the image.
// The image is seen served before the restart, so a sysfs listing that
// silently finds nothing cannot make the test pass, and the leaked device
// itself is asked too (LOOP_GET_STATUS64, no sysfs).
func TestLeakedLoopDeviceIsRemoved(t *testing.T) {
	e := newEnv(t, "")
	e.create("blk", volume.Block, MiB)
	_, image, err := e.volumes.Locate(context.Background(), "blk")
	if err != nil {
		t.Fatal(err)
	}
	var img unix.Stat_t
	if err := unix.Stat(image, &img); err != nil {
		t.Fatal(err)
	}
	d, err := attachImage(image, false, bindFree(nil))
	if err != nil {
		t.Fatal(err)
	}
	leaked := d.Path()
	t.Cleanup(func() {
		// Free what the plugin did not.
		devs, _ := loop.Lookup(image)
		for _, p := range devs {
			o, err := loop.Open(p)
			if err == nil {
				err = o.Remove()
			}
			if err != nil {
				t.Errorf("cleanup: freeing %s: %v", p, err)
			}
		}
	})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if devs, err := loop.Lookup(image); err != nil || !slices.Equal(devs, []string{leaked}) {
		t.Fatalf("before the restart, the image is served by %v (%v), want [%s]", devs, err, leaked)
	}
	e.restart()
	if devs, err := loop.Lookup(image); err != nil || len(devs) != 0 {
		t.Errorf("after the restart, the image is served by %v (%v), want no loop device", devs, err)
	}
	o, err := loop.Open(leaked)
	if err != nil {
		// Detached and deleted by someone else meanwhile: not bound.
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENXIO) {
			t.Errorf("opening %s after the restart: %v", leaked, err)
		}
		return
	}
	defer o.Close()
	st, err := o.Status()
	if err == nil && st.BackingDev == img.Dev && st.BackingInode == img.Ino {
		t.Errorf("leaked %s still serves the image after the restart", leaked)
	} else if err != nil && !errors.Is(err, loop.ErrDetached) {
		t.Errorf("status of %s after the restart: %v", leaked, err)
	}
}

// TestUnpublishWithoutRecordTouchesOnlyOurs checks the cleanup path for
// targets without a record: a bind mount of the volume is removed, other
// paths (an unrelated empty directory, a foreign mount) are left alone.
func TestUnpublishWithoutRecordTouchesOnlyOurs(t *testing.T) {
	e := newEnv(t, "")
	e.create("fs", volume.Filesystem, MiB)
	// Empty directories of the kubelet must not be removed by a stray
	// unpublish naming them.
	if err := e.unpublish("fs", e.root.Kubelet.Pods.FullPath()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.root.Kubelet.Pods.FullPath()); err != nil {
		t.Errorf("unpublish removed the kubelet's pods directory: %v", err)
	}
	target := e.target("lost")
	if err := e.publish("fs", target, volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	// Lose the record: a repeated publish adopts the mount instead of
	// failing on a non-empty target or mounting a second time.
	if err := e.srv.store.remove(target); err != nil {
		t.Fatal(err)
	}
	if err := e.publish("fs", target, volume.Filesystem, false); err != nil {
		t.Fatalf("publish over an unrecorded mount of the same volume: %v", err)
	}
	if n := mounttest.Count(t, target); n != 1 || e.srv.store.get(target) == nil {
		t.Errorf("after adopting: %d mounts, record %v", n, e.srv.store.get(target))
	}
	if err := e.srv.store.remove(target); err != nil {
		t.Fatal(err)
	}
	if err := e.unpublish("fs", target); err != nil {
		t.Fatal(err)
	}
	if n := mounttest.Count(t, target); n != 0 {
		t.Errorf("unrecorded bind mount of the volume not removed (%d mounts)", n)
	}
}

// TestCrashMidUnpublish: a node agent that dies in NodeUnpublishVolume
// after taking a publication down but before removing its record (the
// record goes last, see unpublish) restarts with a record of a
// publication that is gone. The restart puts the publication back, since
// the record says it exists and the kubelet was never told otherwise, and
// the kubelet's retry of the unpublish (the call never answered) takes it
// down for good: no mount, device node, loop device or record is left, and
// the volume can be deleted.
func TestCrashMidUnpublish(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("fs", volume.Filesystem, MiB)
	e.create("blk", volume.Block, MiB)
	fsTarget, blkTarget := e.target("fs"), e.target("blk")
	if err := e.publish("fs", fsTarget, volume.Filesystem, false); err != nil {
		t.Fatal(err)
	}
	if err := e.publish("blk", blkTarget, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	_, image, err := e.volumes.Locate(ctx, "blk")
	if err != nil {
		t.Fatal(err)
	}

	// What unpublish does before it removes a record, done by hand.
	if err := unix.Unmount(fsTarget, unix.UMOUNT_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(fsTarget); err != nil {
		t.Fatal(err)
	}
	e.die()
	d, state := inspectLoop(e.srv.store.get(blkTarget), image)
	if state != loopOwn {
		t.Fatalf("the block publication's loop device is not the recorded one (%v)", state)
	}
	if err := os.Remove(blkTarget); err != nil {
		t.Fatal(err)
	}
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	d.Close()

	e.restart()
	if n := mounttest.Count(t, fsTarget); n != 1 {
		t.Errorf("after the restart: %d mounts at the filesystem target, want the publication back (1)", n)
	}
	if p := e.srv.store.get(blkTarget); p == nil || !isBlockNode(blkTarget, p.Loop.Rdev) {
		t.Errorf("after the restart: block publication %+v, want it back with its device node", p)
	}

	// The kubelet's retry.
	for id, target := range map[string]string{"fs": fsTarget, "blk": blkTarget} {
		if err := e.unpublish(id, target); err != nil {
			t.Fatalf("unpublishing %s again: %v", id, err)
		}
		if p := e.srv.store.get(target); p != nil {
			t.Errorf("%s: record left after the unpublish: %+v", id, p)
		}
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: target left after the unpublish: %v", id, err)
		}
	}
	if n := mounttest.Count(t, fsTarget); n != 0 {
		t.Errorf("%d mounts left at the filesystem target", n)
	}
	if paths, err := loop.Lookup(image); err != nil || len(paths) != 0 {
		t.Errorf("loop devices left over the block image: %v (%v)", paths, err)
	}
	for _, id := range []string{"fs", "blk"} {
		if err := e.volumes.Delete(ctx, id); err != nil {
			t.Errorf("deleting %s after the unpublish: %v", id, err)
		}
	}
}
