package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo"
)

// world describes everything the plugin can have made in e, independent of
// where e lives and of loop device numbers, so two envs can be compared:
// the publication records (in memory and on disk), the mounts below e's
// directory, the loop devices over its files (with their sizes), the
// volumes, and every path below e's directory (a block node by the file
// its loop device serves, a file with its size). A second mount or loop
// device is a line more.
func (e *env) world(t *testing.T) []string {
	t.Helper()
	// The temporary directory's own name, also found in mount roots
	// when /tmp is a filesystem of its own.
	unique := filepath.Join(filepath.Base(filepath.Dir(e.dir)), filepath.Base(e.dir))
	norm := func(format string, args ...any) string {
		return strings.ReplaceAll(fmt.Sprintf(format, args...), unique, "$DIR")
	}
	describe := func(where string, p *publication) string {
		served := ""
		if p.Loop != nil {
			served = loopServes(0, p.Loop.Number)
		}
		return norm("record %s %s: volume %s %s ro=%v access=%d flags=%v boot=%s loop over %q",
			where, p.TargetPath, p.VolumeID, p.Mode, p.ReadOnly, p.AccessMode, p.MountFlags, p.BootID, served)
	}
	var w []string
	for _, p := range e.srv.store.all() {
		w = append(w, describe("in memory", p))
	}
	records := e.root.Ephemeral.CSI.Publications.FullPath()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mountinfo.Under(mounts, e.dir) {
		w = append(w, norm("mount at %s of %s (%s)", m.MountPoint, m.Root, m.Options))
	}
	bindings, err := loop.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings {
		if strings.HasPrefix(b.Backing, e.dir+"/") {
			size, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/size", b.Number))
			if err != nil {
				t.Fatal(err)
			}
			w = append(w, norm("loop device over %s (deleted=%v), %s sectors", b.Backing, b.Deleted, strings.TrimSpace(string(size))))
		}
	}
	vols, err := e.volumes.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		w = append(w, norm("volume %+v", v))
	}
	snaps, err := e.volumes.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		// Not its creation time, which differs between envs.
		w = append(w, fmt.Sprintf("snapshot %s of %s volume %s, %d bytes", s.ID, s.Mode, s.SourceVolumeID, s.SizeBytes))
	}
	err = filepath.WalkDir(e.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if filepath.Dir(p) == records {
			// A record file is named after its target, which
			// differs between envs: describe it by its content.
			var rec publication
			if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &rec) == nil && recordName(rec.TargetPath) == d.Name() {
				w = append(w, describe("on disk", &rec))
				return nil
			}
		}
		desc := d.Type().String()
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFBLK:
			desc += " of loop device over " + loopServes(st.Rdev, -1)
		case unix.S_IFREG:
			desc += fmt.Sprintf(" %d bytes", st.Size)
		}
		w = append(w, norm("path %s %s", p, desc))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(w)
	return w
}

// loopServes names the file a loop device serves, by device number (or by
// loop number when n >= 0), or says why it serves none.
func loopServes(rdev uint64, n int) string {
	attr := fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(rdev), unix.Minor(rdev))
	if n >= 0 {
		attr = fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n)
	}
	b, err := os.ReadFile(attr)
	if err != nil {
		return "nothing (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

// worldDiff lists the lines only one of two sorted worlds has (a line
// twice in one and once in the other counts once).
func worldDiff(want, got []string) string {
	var b strings.Builder
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || (i < len(want) && want[i] < got[j]):
			fmt.Fprintf(&b, "\t- %s\n", want[i])
			i++
		case i == len(want) || got[j] < want[i]:
			fmt.Fprintf(&b, "\t+ %s\n", got[j])
			j++
		default:
			i++
			j++
		}
	}
	return b.String()
}

// rpcCase is one RPC with fixed arguments, after a setup that makes the
// state it runs in. Its name is short: the test's temporary directory is
// named after it, and the plugin's socket path below it must stay within
// the 107 bytes of a unix socket address.
type rpcCase struct {
	name  string
	setup func(e *env)
	call  func(e *env) (proto.Message, error)
	// mounts and loops are how many mounts and loop devices the plugin
	// has after the call.
	mounts, loops int
	// copies puts the env's data on an XFS that makes copy-on-write
	// copies (newCopyEnv), for snapshots, restores and clones.
	copies bool
}

// withoutTime is m without a snapshot's creation time, which differs
// between two envs set up the same way.
func withoutTime(m proto.Message) proto.Message {
	r, ok := m.(*csi.CreateSnapshotResponse)
	if !ok {
		return m
	}
	r = proto.Clone(r).(*csi.CreateSnapshotResponse)
	r.Snapshot.CreationTime = nil
	return r
}

// count returns how many lines of a world start with prefix.
func count(world []string, prefix string) int {
	n := 0
	for _, l := range world {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// concurrency is how many identical calls run at once.
const concurrency = 8

// TestIdempotent calls every RPC of the node service and of the
// development controller service twice in a row with the same arguments,
// and then, in a second plugin set up the same way, 8 times at once. Every
// call must succeed with the same answer (a snapshot's creation time
// aside, between the two plugins), and the plugin must be left exactly as
// one call leaves it: the same records, mounts, loop devices (and their
// sizes), volumes, snapshots and kubelet paths, not one more.
func TestIdempotent(t *testing.T) {
	ctx := context.Background()
	const size = 4 * MiB
	var cases []rpcCase
	for _, mode := range []volume.Mode{volume.Filesystem, volume.Block} {
		m := map[volume.Mode]string{volume.Filesystem: "fs", volume.Block: "block"}[mode]
		create := func(e *env) { e.create("v", mode, size) }
		published := func(e *env) {
			create(e)
			if err := e.publish("v", e.target("t"), mode, false); err != nil {
				e.t.Fatal(err)
			}
		}
		controller := func(e *env) *controller { return &controller{s: e.srv} }
		snapshotted := func(e *env) {
			create(e)
			if _, err := e.volumes.CreateSnapshot(ctx, "v", "s"); err != nil {
				e.t.Fatal(err)
			}
		}
		// A publication of the volume is one mount or one loop device.
		pubMounts, pubLoops := 1, 0
		if mode == volume.Block {
			pubMounts, pubLoops = 0, 1
		}
		cases = append(cases,
			rpcCase{"Publish/" + m, create, func(e *env) (proto.Message, error) {
				return e.srv.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
					VolumeId: "v", TargetPath: e.target("t"), VolumeCapability: capability(mode, rwo),
				})
			}, pubMounts, pubLoops, false},
			rpcCase{"Unpublish/" + m, published, func(e *env) (proto.Message, error) {
				return e.srv.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: e.target("t")})
			}, 0, 0, false},
			rpcCase{"Stats/" + m, published, func(e *env) (proto.Message, error) {
				return e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: e.target("t")})
			}, pubMounts, pubLoops, false},
			rpcCase{"NodeExpand/" + m, published, func(e *env) (proto.Message, error) {
				return e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{
					VolumeId: "v", VolumePath: e.target("t"), CapacityRange: &csi.CapacityRange{RequiredBytes: size},
				})
			}, pubMounts, pubLoops, false},
			rpcCase{"Create/" + m, func(*env) {}, func(e *env) (proto.Message, error) {
				return controller(e).CreateVolume(ctx, &csi.CreateVolumeRequest{
					Name: "v", VolumeCapabilities: []*csi.VolumeCapability{capability(mode, rwo)},
					CapacityRange: &csi.CapacityRange{RequiredBytes: size},
				})
			}, 0, 0, false},
			rpcCase{"Delete/" + m, create, func(e *env) (proto.Message, error) {
				return controller(e).DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v"})
			}, 0, 0, false},
			// Published, so a block volume's loop device must grow
			// with it (and stay one device).
			rpcCase{"ControllerExpand/" + m, published, func(e *env) (proto.Message, error) {
				return controller(e).ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
					VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * size},
				})
			}, pubMounts, pubLoops, false},
			rpcCase{"Validate/" + m, create, func(e *env) (proto.Message, error) {
				return controller(e).ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{
					VolumeId: "v", VolumeCapabilities: []*csi.VolumeCapability{capability(mode, rwo)},
				})
			}, 0, 0, false},
			rpcCase{"Snap/" + m, create, func(e *env) (proto.Message, error) {
				return controller(e).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v"})
			}, 0, 0, true},
			rpcCase{"DelSnap/" + m, snapshotted, func(e *env) (proto.Message, error) {
				return controller(e).DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "s"})
			}, 0, 0, true},
			rpcCase{"Restore/" + m, snapshotted, func(e *env) (proto.Message, error) {
				return controller(e).CreateVolume(ctx, createReq("w", mode, size, fromSnapshot("s")))
			}, 0, 0, true},
			rpcCase{"Clone/" + m, create, func(e *env) (proto.Message, error) {
				return controller(e).CreateVolume(ctx, createReq("w", mode, size, fromVolume("v")))
			}, 0, 0, true},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			envFor := func(t *testing.T) *env {
				if c.copies {
					e, _ := newCopyEnv(t)
					return e
				}
				return newEnv(t, "")
			}
			// Twice in a row.
			e := envFor(t)
			c.setup(e)
			first, err := c.call(e)
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			once := e.world(t)
			if m, l := count(once, "mount at"), count(once, "loop device"); m != c.mounts || l != c.loops {
				t.Errorf("after one call: %d mounts and %d loop devices, want %d and %d:\n\t%s", m, l, c.mounts, c.loops, strings.Join(once, "\n\t"))
			}
			second, err := c.call(e)
			if err != nil {
				t.Fatalf("second call: %v", err)
			}
			if !proto.Equal(first, second) {
				t.Errorf("second call answered %v, the first %v", second, first)
			}
			if twice := e.world(t); !slices.Equal(once, twice) {
				t.Errorf("the second call changed the node:\n%s", worldDiff(once, twice))
			}

			// At once, in a plugin set up the same way.
			p := envFor(t)
			c.setup(p)
			answers := make([]proto.Message, concurrency)
			errs := make([]error, concurrency)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range concurrency {
				wg.Go(func() {
					<-start
					answers[i], errs[i] = c.call(p)
				})
			}
			close(start)
			wg.Wait()
			for i := range concurrency {
				if errs[i] != nil {
					t.Errorf("concurrent call %d: %v", i, errs[i])
				} else if !proto.Equal(answers[i], answers[0]) || !proto.Equal(withoutTime(answers[i]), withoutTime(first)) {
					t.Errorf("concurrent call %d answered %v, the first %v, a single call %v", i, answers[i], answers[0], first)
				}
			}
			if together := p.world(t); !slices.Equal(once, together) {
				t.Errorf("%d concurrent calls left the node otherwise than one call:\n%s", concurrency, worldDiff(once, together))
			}
		})
	}
}
