package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo/mounttest"
	"source.plinth.dev/test/ktest"
)

// TestCSIServeSurvivesKill runs `plinth-node csi-serve` as a process,
// publishes a filesystem and a block volume, kills the process with
// SIGKILL (no cleanup of any kind), starts it again on the same
// directories, and checks that the publications are still the same mount
// and the same device, answer stats, accept a repeated publish without a
// second mount or device, and unpublish cleanly. Its --data-dir is a
// symbolic link, as an operator's may be (csi-serve works at the resolved
// path, which volume.New insists on), and a published volume is still
// refused deletion. A temporary file an interrupted write left in the
// data tree is removed at start.
func TestCSIServeSurvivesKill(t *testing.T) {
	ktest.RequireRoot(t)
	dir := t.TempDir()
	data, kubelet, eph := filepath.Join(dir, "data"), filepath.Join(dir, "kubelet"), filepath.Join(dir, "eph")
	if err := os.MkdirAll(filepath.Join(kubelet, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	realData := filepath.Join(dir, "disk", "plinth")
	stale := filepath.Join(realData, "state", "operations", ".tmp-interrupted")
	if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(realData, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	nodeSock, ctrlSock := filepath.Join(dir, "csi.sock"), filepath.Join(dir, "ctrl.sock")
	args := []string{"csi-serve", "--endpoint", "unix://" + nodeSock, "--controller-endpoint", "unix://" + ctrlSock,
		"--data-dir", data, "--kubelet-dir", kubelet, "--ephemeral-dir", eph, "--node-name", "n1", "--allow-unenforced-capacity"}
	start := func() (*node, csi.NodeClient, csi.ControllerClient) {
		n := startNode(t, args...)
		n.waitLine(t, "serving on "+ctrlSock)
		n.waitLine(t, "serving on "+nodeSock)
		dial := func(p string) *grpc.ClientConn {
			c, err := grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		return n, csi.NewNodeClient(dial(nodeSock)), csi.NewControllerClient(dial(ctrlSock))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, nc, cc := start()
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temporary file %s after start: %v, want it removed", stale, err)
	}

	capOf := func(block bool) *csi.VolumeCapability {
		c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
		if block {
			c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		} else {
			c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
		}
		return c
	}
	type vol struct {
		id, target string
		block      bool
	}
	var vols []vol
	for _, block := range []bool{false, true} {
		name := map[bool]string{false: "fs-vol", true: "blk-vol"}[block]
		resp, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{capOf(block)},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		v := vol{id: resp.Volume.VolumeId, target: filepath.Join(kubelet, "pods", name), block: block}
		if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id, TargetPath: v.target, VolumeCapability: capOf(block)}); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, v)
	}
	payload := []byte("survives a kill")
	if err := os.WriteFile(filepath.Join(vols[0].target, "f"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	writeDev := func(p string, b []byte) {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 4096)
		copy(buf, b)
		if _, err := f.WriteAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	writeDev(vols[1].target, payload)
	for _, v := range vols {
		_, err := cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.id})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("delete of published %s through a linked data directory: %v, want FailedPrecondition", v.id, err)
		}
	}
	var before unix.Stat_t
	if err := unix.Stat(vols[1].target, &before); err != nil {
		t.Fatal(err)
	}

	if err := n.cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.wait(t)
	n, nc, cc = start()

	if got := mounttest.Count(t, vols[0].target); got != 1 {
		t.Errorf("%d mounts at %s after kill and restart, want 1", got, vols[0].target)
	}
	if b, err := os.ReadFile(filepath.Join(vols[0].target, "f")); err != nil || !bytes.Equal(b, payload) {
		t.Errorf("filesystem volume after restart: %q, %v", b, err)
	}
	for _, v := range vols {
		if _, err := nc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: v.target}); err != nil {
			t.Errorf("stats of %s after restart: %v", v.id, err)
		}
		if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id, TargetPath: v.target, VolumeCapability: capOf(v.block)}); err != nil {
			t.Errorf("repeated publish of %s after restart: %v", v.id, err)
		}
	}
	var after unix.Stat_t
	if err := unix.Stat(vols[1].target, &after); err != nil || after.Rdev != before.Rdev {
		t.Errorf("block publication changed device after restart: %v -> %v (%v)", before.Rdev, after.Rdev, err)
	}
	if got := mounttest.Count(t, vols[0].target); got != 1 {
		t.Errorf("%d mounts after republish, want 1", got)
	}
	f, err := os.Open(vols[1].target)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(payload))
	_, err = f.ReadAt(got, 0)
	f.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("block volume after restart: %q, %v", got, err)
	}
	for _, v := range vols {
		if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
			t.Errorf("unpublish %s: %v", v.id, err)
		}
		if _, err := cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("delete %s: %v", v.id, err)
		}
	}
	if err := n.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.wait(t); err != nil {
		t.Errorf("csi-serve exited with %v after SIGTERM:\n%s", err, n.output())
	}
	if mounttest.Mentions(t, dir+"/") > 0 {
		t.Errorf("mounts left below %s", dir)
	}
	bindings, err := loop.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings {
		if strings.HasPrefix(b.Backing, realData) {
			t.Errorf("loop device left over %s", b.Backing)
		}
	}
}
