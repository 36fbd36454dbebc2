package volumetest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/test/ktest"
)

// ReflinkXFS returns an empty directory on an XFS that makes copy-on-write
// copies (reflink=1), removed when the test ends. In the kernel-test VM it
// is on the VM's xfs disk, with project quotas enforced. On the host,
// whose kernel has XFS but no XFS quota support, it is a fresh sparse XFS
// image of 1 GiB below the test's temporary directory, mounted through a
// loop device (mount -o loop detaches it again at unmount): the place to
// test copies without quotas. It needs root, and mkfs.xfs on the host.
func ReflinkXFS(t testing.TB) string {
	t.Helper()
	if ktest.InVM() {
		return ktest.TempDir(t, "xfs")
	}
	return LoopXFS(t, 1<<30)
}

// LoopXFS mounts a fresh XFS (reflink=1, no quotas) of size bytes, a
// sparse image below the test's temporary directory attached to a loop
// device, and returns its mount point; it is unmounted (and the loop
// device detached) when the test ends. The image takes host disk space
// only as the filesystem is written. It needs root and mkfs.xfs.
func LoopXFS(t testing.TB, size int64) string {
	t.Helper()
	ktest.RequireRoot(t)
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		// make test-unit installs xfsprogs; a CI run without it would
		// pass while testing nothing of copy-on-write on the host.
		if os.Getenv("CI") == "true" {
			t.Fatal("needs mkfs.xfs (xfsprogs), and CI=true forbids skipping: run make test-unit, which installs it")
		}
		t.Skip("needs mkfs.xfs (xfsprogs) on the host")
	}
	tmp := t.TempDir()
	img := filepath.Join(tmp, "xfs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.xfs", "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	mnt := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mounting %s: %v: %s", img, err, out)
	}
	t.Cleanup(func() {
		err := unix.Unmount(mnt, 0)
		if errors.Is(err, unix.EBUSY) {
			// A failed test may still hold a file open in it: detach
			// it anyway, so that no mount outlives the test; the loop
			// device goes when the last file closes.
			t.Errorf("unmounting %s: %v (a file still open?); detaching it", mnt, err)
			err = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		if err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	return mnt
}
