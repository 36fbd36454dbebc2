package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

// TestMain lets `make test-kernel` run these tests on the host (as root)
// and in the kernel VM, where XFS and ext4 enforce project quotas.
func TestMain(m *testing.M) { ktest.Main(m) }

const MiB = 1 << 20

// backend is a data filesystem a test runs against.
type backend struct {
	name string
	// dir returns an empty directory on the backend's filesystem.
	dir func(t *testing.T) string
	// enforced: project quotas work there.
	enforced bool
}

// backends returns the filesystems available here: the host's own (quotas
// not enforced, the mode of development hosts) everywhere, plus XFS and
// ext4 with project quotas inside the kernel VM.
func backends(t *testing.T) []backend {
	t.Helper()
	ktest.RequireRoot(t)
	bs := []backend{{name: "host-unenforced", dir: func(t *testing.T) string { return t.TempDir() }}}
	if ktest.InVM() {
		for _, disk := range []string{"xfs", "ext4"} {
			bs = append(bs, backend{name: disk, enforced: true, dir: func(t *testing.T) string { return ktest.TempDir(t, disk) }})
		}
	}
	return bs
}

// forEachBackend runs fn as a subtest on every backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// newManager places a data tree in dir and returns a Manager over it,
// probing quota support like the node does (volumetest.DataDir).
// Unenforced backends allow unenforced capacity.
func newManager(t *testing.T, dir string) *Manager {
	t.Helper()
	d, qerr := volumetest.DataDir(t, dir)
	m, err := New(Config{Data: d, QuotaError: qerr, AllowUnenforced: qerr != nil})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newManagerOn is newManager on a backend, checking that the probe agrees
// with what the backend promises.
func newManagerOn(t *testing.T, b backend) *Manager {
	t.Helper()
	m := newManager(t, b.dir(t))
	if m.CapacityEnforced() != b.enforced {
		t.Fatalf("backend %s: quota probe says enforced=%v (%v), want %v", b.name, m.CapacityEnforced(), m.QuotaError, b.enforced)
	}
	return m
}

// tmpfsDir mounts a tmpfs of the given size for the test.
func tmpfsDir(t *testing.T, size int64) string { return volumetest.Tmpfs(t, size) }

// assertAllSettled fails for every volume List reports pending or with a
// problem, saying when (as "when: entry").
func assertAllSettled(t *testing.T, m *Manager, when string) {
	t.Helper()
	list, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Pending != "" || e.Problem != "" {
			t.Errorf("%s: %+v", when, e)
		}
	}
}

// assertGone fails unless volume id has left no trace: no entry in
// volumes/, no intent record, no project ID claim.
func assertGone(t *testing.T, m *Manager, id string) {
	t.Helper()
	fsPath, imgPath := m.paths(id)
	for _, p := range []string{fsPath, imgPath} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (err=%v)", p, err)
		}
	}
	if in, err := m.readIntent(id); err != nil || in != nil {
		t.Errorf("intent record of %s: %+v, %v; want none", id, in, err)
	}
	if rec, err := m.readRecord(id); err != nil || rec != nil {
		t.Errorf("record of %s: %+v, %v; want none", id, rec, err)
	}
	if m.ProjectIDs != nil {
		if pid, ok, err := m.ProjectIDs.Lookup(id); err != nil || ok {
			t.Errorf("project ID claim of %s: %d, %v, %v; want none", id, pid, ok, err)
		}
	}
	if _, err := m.Stat(context.Background(), id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat(%s) = %v, want ErrNotFound", id, err)
	}
}

// allocated returns the bytes allocated to the file at p.
func allocated(t *testing.T, p string) (size, alloc int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

// entries lists a directory's names (for "nothing left behind" checks).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// writeFile writes n bytes to the new file dir/name and syncs it
// (volumetest.WriteNew).
func writeFile(t *testing.T, dir, name string, n int) error {
	t.Helper()
	return volumetest.WriteNew(filepath.Join(dir, name), n)
}

// asPodUser runs fn on an OS thread without CAP_SYS_RESOURCE, which lets
// its holder exceed quota limits on ext4 (the generic quota code honours
// it; XFS does not). Pods write without it, so limits are tested that way.
func asPodUser(t *testing.T, fn func() error) error {
	t.Helper()
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("capget: %v", err)
	}
	orig := caps
	caps[0].Effective &^= 1 << unix.CAP_SYS_RESOURCE
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("capset: %v", err)
	}
	err := fn()
	if rerr := unix.Capset(&hdr, &orig[0]); rerr != nil {
		// Leave the thread locked so it dies with this goroutine
		// instead of running others with the wrong capabilities.
		t.Fatalf("restoring capabilities: %v", rerr)
	}
	runtime.UnlockOSThread()
	return err
}

// attach serves image through a new loop device (read-only if ro), as a
// published block volume is served, until the test ends.
func attach(t *testing.T, image string, ro bool) *loop.Device {
	t.Helper()
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := loop.Create(f, loop.Options{ReadOnly: ro})
	f.Close()
	if err != nil {
		t.Fatalf("attaching %s: %v", image, err)
	}
	t.Cleanup(func() { _ = d.Remove() })
	return d
}
