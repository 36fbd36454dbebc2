package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	"source.plinth.dev/pkg/mountinfo"
	"source.plinth.dev/pkg/mountinfo/mounttest"
)

// snapshot lists every path below dir with its type, mode, size and
// modification time, to prove a request touched nothing there: not even a
// directory created and removed again (its parent's time would change).
// Symlinks are listed, not followed.
func snapshot(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBadRequestsAreRefusedAndTouchNothing(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("vol", volume.Filesystem, MiB)
	e.create("blk", volume.Block, MiB)
	kubelet := e.root.Kubelet.FullPath()
	outside := t.TempDir()
	// A symlink inside the kubelet directory that leads out of it.
	if err := os.Symlink(outside, filepath.Join(kubelet, "pods", "escape")); err != nil {
		t.Fatal(err)
	}
	good := e.target("good")
	mount := capability(volume.Filesystem, rwo)
	withMount := func(f func(*csi.VolumeCapability_MountVolume)) *csi.VolumeCapability {
		c := capability(volume.Filesystem, rwo)
		f(c.GetMount())
		return c
	}
	cases := []struct {
		name   string
		id     string
		target string
		cap    *csi.VolumeCapability
		stage  string
		want   codes.Code
	}{
		{"empty id", "", good, mount, "", codes.InvalidArgument},
		{"dot-dot id", "..", good, mount, "", codes.InvalidArgument},
		{"id with slash", "a/b", good, mount, "", codes.InvalidArgument},
		{"id of 200 characters", strings.Repeat("a", 200), good, mount, "", codes.InvalidArgument},
		{"id with NUL", "vol\x00", good, mount, "", codes.InvalidArgument},
		{"upper-case id", "VOL", good, mount, "", codes.InvalidArgument},
		{"unknown id", "missing", good, mount, "", codes.NotFound},
		{"empty target", "vol", "", mount, "", codes.InvalidArgument},
		{"relative target", "vol", "pods/x", mount, "", codes.InvalidArgument},
		{"target outside", "vol", filepath.Join(outside, "x"), mount, "", codes.InvalidArgument},
		{"target /etc", "vol", "/etc/plinth-test", mount, "", codes.InvalidArgument},
		{"target with ..", "vol", kubelet + "/pods/../../x", mount, "", codes.InvalidArgument},
		{"target is the kubelet dir", "vol", kubelet, mount, "", codes.InvalidArgument},
		{"target is the pods dir", "vol", filepath.Join(kubelet, "pods"), mount, "", codes.InvalidArgument},
		{"target in plugins_registry", "vol", filepath.Join(kubelet, "plugins_registry", "x"), mount, "", codes.InvalidArgument},
		{"target in a driver's socket directory", "vol", filepath.Join(kubelet, "plugins", "storage.plinth.dev", "x"), mount, "", codes.InvalidArgument},
		{"target with trailing slash", "vol", good + "/", mount, "", codes.InvalidArgument},
		{"target with NUL", "vol", good + "\x00", mount, "", codes.InvalidArgument},
		{"target component of 256 bytes", "vol", filepath.Join(kubelet, "pods", strings.Repeat("a", 256)), mount, "", codes.InvalidArgument},
		{"target of 4096 bytes", "vol", kubelet + "/pods" + strings.Repeat("/a", 2048)[:4096-len(kubelet)-len("/pods")], mount, "", codes.InvalidArgument},
		{"target through a symlink out", "vol", filepath.Join(kubelet, "pods", "escape", "x"), mount, "", codes.PermissionDenied},
		{"staging path outside", "vol", good, mount, "/tmp/stage", codes.InvalidArgument},
		{"no capability", "vol", good, nil, "", codes.InvalidArgument},
		{"no access mode", "vol", good, &csi.VolumeCapability{AccessType: mount.AccessType}, "", codes.InvalidArgument},
		{"no access type", "vol", good, &csi.VolumeCapability{AccessMode: mount.AccessMode}, "", codes.InvalidArgument},
		{"multi-node mode", "vol", good, capability(volume.Filesystem, csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), "", codes.InvalidArgument},
		{"unknown access mode", "vol", good, capability(volume.Filesystem, csi.VolumeCapability_AccessMode_UNKNOWN), "", codes.InvalidArgument},
		{"fs type", "vol", good, withMount(func(m *csi.VolumeCapability_MountVolume) { m.FsType = "ext4" }), "", codes.InvalidArgument},
		{"mount flag suid", "vol", good, withMount(func(m *csi.VolumeCapability_MountVolume) { m.MountFlags = []string{"suid"} }), "", codes.InvalidArgument},
		{"mount flag bind", "vol", good, withMount(func(m *csi.VolumeCapability_MountVolume) { m.MountFlags = []string{"bind"} }), "", codes.InvalidArgument},
		{"block access to a filesystem volume", "vol", good, capability(volume.Block, rwo), "", codes.FailedPrecondition},
		{"mount access to a block volume", "blk", good, mount, "", codes.FailedPrecondition},
	}
	before, beforeOut := snapshot(t, kubelet), snapshot(t, outside)
	for _, tc := range cases {
		_, err := e.srv.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: tc.id, TargetPath: tc.target, VolumeCapability: tc.cap, StagingTargetPath: tc.stage,
		})
		wantCode(t, "NodePublishVolume: "+tc.name, err, tc.want)
		if status.Convert(err).Message() == "" {
			t.Errorf("%s: error without a message", tc.name)
		}
	}
	// Unpublish, stats and expand refuse the same IDs and paths, except
	// the places inside the kubelet directory where only publishing is
	// refused (an unpublish there undoes only what provably serves the
	// volume, and may clean up after an older plugin).
	publishOnly := map[string]bool{"target is the pods dir": true, "target in plugins_registry": true, "target in a driver's socket directory": true}
	for _, tc := range cases {
		if tc.cap == nil || tc.want == codes.PermissionDenied || strings.Contains(tc.name, "access") || strings.Contains(tc.name, "mode") ||
			strings.Contains(tc.name, "flag") || tc.name == "fs type" || tc.name == "staging path outside" || tc.name == "unknown id" || publishOnly[tc.name] {
			continue
		}
		_, err := e.srv.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tc.id, TargetPath: tc.target})
		wantCode(t, "NodeUnpublishVolume: "+tc.name, err, codes.InvalidArgument)
	}
	for _, tc := range []struct {
		name, id, path string
		want           codes.Code
	}{
		{"empty id", "", good, codes.InvalidArgument},
		{"bad id", "../x", good, codes.InvalidArgument},
		{"empty path", "vol", "", codes.InvalidArgument},
		{"unknown volume", "missing", good, codes.NotFound},
		{"unpublished path", "vol", good, codes.NotFound},
		{"relative path", "vol", "some/path", codes.NotFound},
	} {
		_, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: tc.id, VolumePath: tc.path})
		wantCode(t, "NodeGetVolumeStats: "+tc.name, err, tc.want)
		_, err = e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: tc.id, VolumePath: tc.path})
		wantCode(t, "NodeExpandVolume: "+tc.name, err, tc.want)
	}
	if after := snapshot(t, kubelet); !slices.Equal(before, after) {
		t.Errorf("refused requests changed the kubelet directory:\nbefore %v\nafter  %v", before, after)
	}
	if after := snapshot(t, outside); !slices.Equal(beforeOut, after) {
		t.Errorf("refused requests changed a directory outside: %v", after)
	}
	if _, err := os.Lstat("/etc/plinth-test"); err == nil {
		t.Errorf("/etc/plinth-test was created")
	}
}

// FuzzValidateRequest throws arbitrary volume IDs and paths at the node
// service. The kubelet tree holds symlinks that lead out of it (to a
// directory outside, directly, by a relative hop and as a would-be target)
// and one that stays inside. Whatever the input: no panic, no Internal
// error, the directory outside is never changed or mounted on, and a
// request that fails changes nothing in the kubelet directory; one that
// succeeds names the real volume and a clean path that, with symlinks
// resolved, is strictly inside the kubelet directory, and is then
// unpublished cleanly. The seed corpus runs with every `go test`; make
// test-fuzz fuzzes it briefly.
func FuzzValidateRequest(f *testing.F) {
	seeds := []struct {
		prefix byte
		id     string
		path   string
	}{
		{0, "vol", "/etc/passwd"}, {1, "vol", "pods/ok"}, {2, "vol", "x"}, {2, "vol", "../../x"},
		{2, "..", "x"}, {2, "vol\x00", "x"}, {2, strings.Repeat("a", 200), "x"}, {1, "vol", ""},
		{2, "missing", "y"}, {2, "vol", "a/b"}, {2, "vol", "x/"}, {3, "vol", "tmp"}, {2, "blk", "b"},
		{1, "vol", "plugins"}, {0, "vol", "relative"},
		// Names the kernel refuses (ENAMETOOLONG): one overlong component, an overlong path.
		{1, "vol", "pods/" + strings.Repeat("1", 1100) + "escape"}, {2, "vol", strings.Repeat("d/", 2100)},
		// Through the symlinks below.
		{2, "vol", "escape/x"}, {2, "vol", "escape/sub"}, {2, "vol", "escape/sub/x"}, {2, "vol", "escape"},
		{1, "vol", "out/x"}, {1, "vol", "pods/escape/x"}, {2, "vol", "hop/x"}, {2, "vol", "hop/sub/x"},
		{2, "vol", "sub-link"}, {2, "vol", "sub-link/x"}, {2, "vol", "inside/x"}, {2, "vol", "inside"}, {2, "vol", "real/x"},
	}
	for _, s := range seeds {
		f.Add(s.prefix, s.id, s.path)
	}
	// A directory outside the kubelet directory, with an empty
	// subdirectory a mount could land on and a file a write could change.
	outside := f.TempDir()
	if err := os.Mkdir(filepath.Join(outside, "sub"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "file"), []byte("outside"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		// A publish that escaped (the failure this test looks for)
		// must not leave its mount on the host: undo it, deepest first,
		// after the plugin's own cleanup (registered later, run first).
		mounts, err := mountinfo.Read()
		if err != nil {
			f.Error(err)
			return
		}
		under := mountinfo.Under(mounts, outside)
		for i := len(under) - 1; i >= 0; i-- {
			f.Errorf("cleanup: unmounting %s, mounted outside the kubelet directory", under[i].MountPoint)
			if err := unix.Unmount(under[i].MountPoint, unix.MNT_DETACH); err != nil {
				f.Error(err)
			}
		}
	})
	e := newEnv(f, "")
	ctx := context.Background()
	e.create("vol", volume.Filesystem, MiB)
	kubelet := e.root.Kubelet.FullPath()
	pods := e.root.Kubelet.Pods.FullPath()
	if err := os.Mkdir(filepath.Join(pods, "real"), 0o750); err != nil {
		f.Fatal(err)
	}
	for link, to := range map[string]string{
		filepath.Join(pods, "escape"):   outside,                       // absolute, out
		filepath.Join(kubelet, "out"):   outside,                       // absolute, out, one level up
		filepath.Join(pods, "hop"):      "../out",                      // relative, to a link that leads out
		filepath.Join(pods, "sub-link"): filepath.Join(outside, "sub"), // a would-be target, out
		filepath.Join(pods, "inside"):   "real",                        // relative, stays inside
	} {
		if err := os.Symlink(to, link); err != nil {
			f.Fatal(err)
		}
	}
	root, err := filepath.EvalSymlinks(kubelet)
	if err != nil {
		f.Fatal(err)
	}
	// resolvedInside reports whether p, with every symlink resolved, is
	// strictly below the kubelet directory.
	resolvedInside := func(p string) (bool, string) {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			return false, err.Error()
		}
		rel, err := filepath.Rel(root, r)
		return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../"), r
	}
	f.Fuzz(func(t *testing.T, prefix byte, id, path string) {
		switch prefix % 4 {
		case 1:
			path = kubelet + "/" + path
		case 2:
			path = pods + "/" + path
		case 3:
			path = "/" + path
		}
		before, beforeOut := snapshot(t, kubelet), snapshot(t, outside)
		_, err := e.srv.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: path, VolumeCapability: capability(volume.Filesystem, rwo),
		})
		switch status.Code(err) {
		case codes.OK:
			if id != "vol" || !e.root.Kubelet.Contains(path) || path == kubelet || filepath.Clean(path) != path {
				t.Fatalf("published volume %q at %q", id, path)
			}
			ok, resolved := resolvedInside(path)
			if !ok {
				t.Fatalf("published volume %q at %q, which resolves to %s, outside the kubelet directory %s", id, path, resolved, root)
			}
			if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
				t.Fatalf("published at %q, which is not a directory: %v, %v", path, fi, err)
			}
			// The mount table names the mount point with links resolved.
			if n := mounttest.Count(t, resolved); n != 1 {
				t.Fatalf("published at %q: %d mounts at %s, want 1", path, n, resolved)
			}
			if _, err := e.srv.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: path}); err != nil {
				t.Fatalf("unpublishing %q: %v", path, err)
			}
			if _, err := os.Lstat(path); err == nil {
				t.Fatalf("target %q left after unpublish", path)
			}
		case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.FailedPrecondition, codes.AlreadyExists:
			if after := snapshot(t, kubelet); !slices.Equal(before, after) {
				t.Fatalf("refused publish of %q at %q (%v) changed the kubelet directory", id, path, err)
			}
		default:
			t.Fatalf("publish of %q at %q: %v", id, path, err)
		}
		if after := snapshot(t, outside); !slices.Equal(beforeOut, after) {
			t.Fatalf("publish of %q at %q (%v) changed the directory outside:\nbefore %v\nafter  %v", id, path, err, beforeOut, after)
		}
		if n := mounttest.Mentions(t, outside); n != 0 {
			t.Fatalf("publish of %q at %q (%v) left the directory outside in the mount table %d times", id, path, err, n)
		}
		for _, call := range []func() error{
			func() error {
				_, err := e.srv.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
				return err
			},
			func() error {
				_, err := e.srv.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: path})
				return err
			},
		} {
			switch c := status.Code(call()); c {
			case codes.InvalidArgument, codes.NotFound:
			default:
				t.Fatalf("stats/expand of unpublished %q at %q: %v", id, path, c)
			}
		}
	})
}

// TestStatusFollowsClassification: the gRPC code of a volume error agrees
// with the volume layer's one classification. An infeasible error never
// gets a code a CO retries unchanged, a transient one never a code that
// tells it to give up.
func TestStatusFollowsClassification(t *testing.T) {
	final := map[codes.Code]bool{codes.InvalidArgument: true, codes.AlreadyExists: true,
		codes.ResourceExhausted: true, codes.FailedPrecondition: true, codes.OutOfRange: true}
	for _, sentinel := range []error{volume.ErrInvalid, volume.ErrExists, volume.ErrNoSpace,
		volume.ErrCapacityNotEnforced, volume.ErrNotFound, volume.ErrInUse, errors.New("EIO")} {
		err := fmt.Errorf("expanding volume x: %w", sentinel)
		code := status.Code(statusFromVolume(err))
		if volume.Infeasible(err) && !final[code] {
			t.Errorf("%v is infeasible but maps to %v, which a CO retries", sentinel, code)
		}
		if !volume.Infeasible(err) && (code == codes.InvalidArgument || code == codes.ResourceExhausted || code == codes.AlreadyExists) {
			t.Errorf("%v is transient but maps to %v, which tells a CO to give up", sentinel, code)
		}
	}
}
