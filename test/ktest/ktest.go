// Package ktest runs a package's tests on a real Linux kernel inside a
// qemu micro-VM, for code whose behaviour only the kernel can show
// (project quotas, loop devices).
//
// A package opts in by calling Main from its TestMain:
//
//	func TestMain(m *testing.M) { ktest.Main(m) }
//
// `make test-kernel` finds such packages (grep for "ktest.Main("), builds
// each one's test binary statically, and boots them all in one VM with
// test/ktest/cmd/ktest, which also serves as the VM's /init. Inside the
// VM the test binaries run as children of init, so a test that panics
// still ends in a reported failure rather than a kernel panic.
//
// Tests that need the VM call RequireVM (or Mount/TempDir, which call it);
// they skip in a plain `go test` on the host, where the host kernel may
// lack the feature (this one has no XFS quota support). Tests that only
// need root (loop devices) call RequireRoot and run both on the host and
// in the VM.
//
// Inside the VM everything a kernel test needs is present, so a skip there
// is a test that silently stopped testing: the VM's init reads each test
// binary's verbose output and fails the binary for every test or benchmark
// that skipped without declaring it. A test that must not run in the VM
// (it needs a tool or a disk size the VM lacks and runs on the host
// instead) says so with SkipExpected and the reason, which is the one way
// to skip there.
//
// The VM has the disks listed by Disks, mounted under /mnt (XFS and ext4
// with prjquota, and an XFS without quotas), a tmpfs /tmp, loopback up
// (no other network), and the loop, xfs and quota modules loaded. Host
// programs a test starts come in with the runner's -with (the controller
// tests' etcd, kube-apiserver, kube-controller-manager and plinth-node;
// see test-kernel.sh). To run only some tests:
//
//	build/scripts/test-kernel.sh -test.run=Quota
package ktest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Set by the VM's init for the test binaries it starts: envVM to "1",
// envSkips to the file SkipExpected appends the names of skipped tests to.
const (
	envVM    = "PLINTH_KTEST_VM"
	envSkips = "PLINTH_KTEST_SKIPS"
)

// Disk is a disk image attached to the VM and mounted by its init.
type Disk struct {
	// Name is the mount point below /mnt and the key for Mount.
	Name string
	// FS is the filesystem type passed to mount(2).
	FS string
	// Size of the sparse image in bytes.
	Size int64
	// Mkfs is the host command that formats the image (its path is
	// appended).
	Mkfs []string
	// Options are the mount options.
	Options string
}

// Disks returns the filesystems every kernel test can use. The images are
// made fresh on the host for every run, attached as qemu snapshots and
// found by init through their serial (the name). It is a function, not a
// variable, so no package can change the table the host and guest share.
func Disks() []Disk {
	return []Disk{
		// mkfs.xfs refuses images under 300 MB; sparse files cost nothing.
		// reflink=1, as on a node (core's mkfsArgs): snapshots and
		// clones are tested here (volume's TestBlockSnapshotAndRestore).
		{Name: "xfs", FS: "xfs", Size: 512 << 20, Mkfs: []string{"mkfs.xfs", "-q", "-f", "-m", "reflink=1"}, Options: "prjquota"},
		{Name: "ext4", FS: "ext4", Size: 256 << 20, Mkfs: []string{"mkfs.ext4", "-q", "-F", "-O", "quota,project", "-E", "quotatype=prjquota"}, Options: "prjquota"},
		// An XFS without quota options, to test that missing support is
		// detected and explained.
		{Name: "xfs-noquota", FS: "xfs", Size: 300 << 20, Mkfs: []string{"mkfs.xfs", "-q", "-f"}},
		// A version 4 XFS that stores only 16-bit project IDs, with
		// quotas enforced: Plinth's IDs start above 2^16, so the probe
		// must refuse it (fsquota's TestProbeVM).
		{Name: "xfs-projid16", FS: "xfs", Size: 300 << 20, Mkfs: []string{"mkfs.xfs", "-q", "-f", "-m", "crc=0", "-i", "projid32bit=0"}, Options: "prjquota"},
		// An XFS big enough for its allocator's 8 GiB extents, to see
		// what a failed fallocate leaves behind (volume's
		// TestFailedExpansionOnXFSIsTrimmed). Sparse: mkfs writes
		// about 65 MB of it.
		{Name: "xfs-12g", FS: "xfs", Size: 12 << 30, Mkfs: []string{"mkfs.xfs", "-q", "-f", "-m", "reflink=1"}},
	}
}

// MountRoot is where the VM's init mounts Disks.
const MountRoot = "/mnt"

// Tests is what Main runs: a *testing.M, or a wrapper around one that
// also tears down what the tests shared (controllertest.Tests stops the
// package's control plane).
type Tests interface{ Run() int }

// Main runs the package's tests. Use it from TestMain so the package is
// picked up by `make test-kernel`. When the binary itself was booted as
// the VM's /init (PID 1), it acts as init and runs itself as the only
// test binary.
func Main(m Tests) {
	if os.Getpid() == 1 {
		exe, err := os.Executable()
		if err != nil {
			exe = os.Args[0]
		}
		RunInit(exe)
	}
	os.Exit(m.Run())
}

// InVM reports whether the test binary runs inside the ktest VM.
func InVM() bool { return os.Getenv(envVM) == "1" }

// RequireVM skips the test outside the ktest VM. Inside it, it does
// nothing: a kernel test there must pass or fail, never skip.
func RequireVM(t testing.TB) {
	t.Helper()
	if !InVM() {
		t.Skip("needs the kernel test VM: run `make test-kernel`")
	}
}

// SkipExpected skips the test, declaring the skip expected: in the VM,
// init accepts it instead of failing the test binary for a surprise skip.
// Use it only where the test cannot run in the VM by design, with a reason
// that says where it runs instead.
func SkipExpected(t testing.TB, reason string) {
	t.Helper()
	if InVM() {
		if err := declareSkip(os.Getenv(envSkips), t.Name()); err != nil {
			t.Fatalf("declaring the expected skip (%s): %v", reason, err)
		}
	}
	t.Skip("expected skip: " + reason)
}

// RequireRoot skips the test when not running as root, except in CI
// (CI=true), where every root test must run, so skipping is a failure.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("test needs root, and CI=true forbids skipping it")
	}
	t.Skip("needs root")
}

// Mount returns the mount point of the VM disk called name (see Disks).
// It skips outside the VM and fails if the disk is not mounted.
func Mount(t testing.TB, name string) string {
	t.Helper()
	RequireVM(t)
	for _, d := range Disks() {
		if d.Name == name {
			mnt := filepath.Join(MountRoot, name)
			if !isMountPoint(mnt) {
				t.Fatalf("disk %q is not mounted at %s (see the VM init log above)", name, mnt)
			}
			return mnt
		}
	}
	t.Fatalf("no ktest disk called %q", name)
	return ""
}

// TempDir returns a new empty directory on the VM disk called name,
// removed when the test ends.
func TempDir(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp(Mount(t, name), "test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleaning up %s: %v", dir, err)
		}
	})
	return dir
}

// isMountPoint reports whether dir is on another filesystem than its
// parent.
func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(dir, &st) != nil || syscall.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
