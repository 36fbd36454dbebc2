package loop_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/ktest"
)

// These tests run on the host as root and in the kernel test VM.
func TestMain(m *testing.M) { ktest.Main(m) }

const MiB = 1 << 20

var header = []byte("plinth-loop-test")

// backing creates a sparse file of size bytes starting with header, in dir
// (a temporary directory when dir is "").
func backing(t testing.TB, dir string, size int64) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, fmt.Sprintf("backing-%d.img", time.Now().UnixNano()))
	if err := os.WriteFile(p, header, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// create attaches path with opts and removes the device at cleanup if the
// test did not.
func create(t testing.TB, path string, opts loop.Options) *loop.Device {
	t.Helper()
	mode := os.O_RDWR
	if opts.ReadOnly {
		mode = os.O_RDONLY
	}
	f, err := os.OpenFile(path, mode, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := loop.Create(f, opts)
	if err != nil {
		t.Fatalf("Create(%s, %+v): %v", path, opts, err)
	}
	t.Cleanup(func() {
		// Remove what the test left; a device the test removed or
		// closed is reopened by path.
		if err := d.Remove(); err == nil || !errors.Is(err, os.ErrClosed) {
			return
		}
		if o, err := loop.Open(d.Path()); err == nil {
			if err := o.Remove(); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return d
}

func sysfs(t testing.TB, d *loop.Device, attr string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/%s", d.Number(), attr))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestReadOnly(t *testing.T) {
	ktest.RequireRoot(t)
	d := create(t, backing(t, "", 16*MiB), loop.Options{ReadOnly: true})
	flags, err := d.Flags()
	if err != nil {
		t.Fatal(err)
	}
	if !flags.ReadOnly || sysfs(t, d, "ro") != "1" {
		t.Errorf("flags %+v, sysfs ro=%s: want read-only", flags, sysfs(t, d, "ro"))
	}
	f, err := os.OpenFile(d.Path(), os.O_RDWR, 0)
	if err != nil {
		// Refusing the open is as good as refusing the write.
		if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
			t.Fatalf("opening a read-only device for writing: %v", err)
		}
		return
	}
	defer f.Close()
	got := make([]byte, len(header))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, header) {
		t.Errorf("reading the device: %q, %v; want %q", got, err, header)
	}
	_, err = f.WriteAt([]byte("overwrite"), 0)
	if err == nil {
		err = f.Sync()
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EROFS) {
		t.Errorf("writing to a read-only device: %v, want EPERM or EROFS", err)
	}
}

func TestCreateRefusesReadOnlyBackingForWritableDevice(t *testing.T) {
	ktest.RequireRoot(t)
	f, err := os.Open(backing(t, "", MiB))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := boundTo(t, f.Name())
	if d, err := loop.Create(f, loop.Options{}); err == nil {
		d.Remove()
		t.Fatal("Create made a writable device over a read-only descriptor")
	}
	if _, err := loop.Create(f, loop.Options{ReadOnly: true, BlockSize: 3000}); err == nil || !strings.Contains(err.Error(), "block size") {
		t.Errorf("Create with block size 3000: %v, want an error about the block size", err)
	}
	if after := boundTo(t, f.Name()); len(after) != len(before) {
		t.Errorf("refused Create left devices behind: %v", after)
	}
}

// TestDirectIOReportedTruthfully checks that Flags reports what the kernel
// does, not what was asked: the VM's 6.1 kernel accepts direct I/O over a
// tmpfs file and runs buffered.
func TestDirectIOReportedTruthfully(t *testing.T) {
	ktest.RequireRoot(t)
	type place struct {
		name    string
		dir     string
		wantDIO *bool // known outcome on the VM's pinned kernel
	}
	yes, no := true, false
	places := []place{{name: "tempdir", dir: t.TempDir()}}
	if ktest.InVM() {
		places = []place{
			{name: "xfs", dir: ktest.TempDir(t, "xfs"), wantDIO: &yes},
			{name: "tmpfs", dir: t.TempDir(), wantDIO: &no},
		}
	}
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			d := create(t, backing(t, p.dir, 16*MiB), loop.Options{DirectIO: true, BlockSize: 4096})
			flags, err := d.Flags()
			if err != nil {
				t.Fatal(err)
			}
			dio := sysfs(t, d, "loop/dio")
			t.Logf("requested direct I/O; Flags().DirectIO=%v, sysfs loop/dio=%s", flags.DirectIO, dio)
			if flags.DirectIO != (dio == "1") {
				t.Errorf("Flags().DirectIO=%v but the kernel's loop/dio=%s", flags.DirectIO, dio)
			}
			if p.wantDIO != nil && flags.DirectIO != *p.wantDIO {
				t.Errorf("direct I/O on %s = %v, want %v on this kernel", p.name, flags.DirectIO, *p.wantDIO)
			}
			if bs := sysfs(t, d, "queue/logical_block_size"); bs != "4096" {
				t.Errorf("logical block size %s, want 4096", bs)
			}
		})
	}
}

func TestRefreshSizeAfterGrow(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 32*MiB)
	d := create(t, path, loop.Options{})
	blkSize := func() uint64 {
		// BLKGETSIZE64 through a separate descriptor, as a user of the
		// volume would see it.
		f, err := os.Open(d.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var size uint64
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); e != 0 {
			t.Fatal(e)
		}
		return size
	}
	if got := blkSize(); got != 32*MiB {
		t.Fatalf("BLKGETSIZE64 = %d, want %d", got, 32*MiB)
	}
	if err := os.Truncate(path, 48*MiB); err != nil {
		t.Fatal(err)
	}
	if got := blkSize(); got != 32*MiB {
		t.Fatalf("size changed before RefreshSize: %d", got)
	}
	if err := d.RefreshSize(); err != nil {
		t.Fatal(err)
	}
	if got := blkSize(); got != 48*MiB {
		t.Errorf("BLKGETSIZE64 after RefreshSize = %d, want %d", got, 48*MiB)
	}
	if got, err := d.Size(); err != nil || got != 48*MiB {
		t.Errorf("Size() = %d, %v; want %d", got, err, 48*MiB)
	}
}

// TestBindingsFollowTheBackingFile checks the sysfs listing against the
// device's own view, before and after its backing file is unlinked.
func TestBindingsFollowTheBackingFile(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{})
	find := func() (loop.Binding, int) {
		t.Helper()
		all, err := loop.Bindings()
		if err != nil {
			t.Fatal(err)
		}
		var found loop.Binding
		n := 0
		for _, b := range all {
			if b.Number == d.Number() {
				found = b
				n++
			}
		}
		return found, n
	}
	b, n := find()
	if n != 1 || b.Backing != path || b.Deleted || b.Path() != d.Path() {
		t.Errorf("Bindings has %d entries for %s: %+v (path %s); want one over %s", n, d.Path(), b, b.Path(), path)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b, n = find()
	if n != 1 || b.Backing != path || !b.Deleted {
		t.Errorf("after unlinking the backing file, Bindings has %d entries for %s: %+v; want one over %s, deleted", n, d.Path(), b, path)
	}
	if got, err := loop.Lookup(path); err != nil || len(got) != 0 {
		t.Errorf("Lookup of an unlinked backing file = %v, %v; want none (no path leads to it)", got, err)
	}
}

// TestLookupThroughUnreachableMount: a file attached through a mount that
// is gone from the reader's view (here a bind mount lazily unmounted; on a
// node, the mount namespace of a node agent's container that restarted)
// is named by sysfs by its path below that mount's root. Lookup and In
// still find its device by the file's identity, and a file elsewhere with
// the same tail is not taken for it.
func TestLookupThroughUnreachableMount(t *testing.T) {
	ktest.RequireRoot(t)
	dir := t.TempDir()
	path := backing(t, dir, 8*MiB)
	other := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(other, header, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	if err := unix.Mount(dir, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	d := create(t, filepath.Join(mnt, filepath.Base(path)), loop.Options{})
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	name, err := d.BackingFile()
	if err != nil || name != "/"+filepath.Base(path) {
		t.Fatalf("sysfs names the file %q (%v); want %q, its path below the detached mount", name, err, "/"+filepath.Base(path))
	}
	if got, err := loop.Lookup(path); err != nil || len(got) != 1 || got[0] != d.Path() {
		t.Errorf("Lookup(%s) = %v, %v; want [%s]", path, got, err, d.Path())
	}
	if got, err := loop.Lookup(other); err != nil || len(got) != 0 {
		t.Errorf("Lookup of another file with the same tail = %v, %v; want none", got, err)
	}
	in, err := loop.In(dir)
	if err != nil || len(in) != 1 || in[0].Number != d.Number() || in[0].Backing != path {
		t.Errorf("In(%s) = %+v, %v; want device %d over %s", dir, in, err, d.Number(), path)
	}
	if in, err := loop.In(filepath.Dir(other)); err != nil || len(in) != 0 {
		t.Errorf("In(a directory with a file of the same name) = %+v, %v; want none", in, err)
	}
}

func TestOpenAndIdentity(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{})
	o, err := loop.Open(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Number() != d.Number() || o.Dev() != d.Dev() {
		t.Errorf("Open: number %d dev %#x, Create: number %d dev %#x", o.Number(), o.Dev(), d.Number(), d.Dev())
	}
	var st unix.Stat_t
	if err := unix.Stat(d.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if d.Dev() != st.Rdev || unix.Major(d.Dev()) != loop.Major {
		t.Errorf("Dev() = %#x, device node says %#x", d.Dev(), st.Rdev)
	}
	if got, err := o.BackingFile(); err != nil || got != path {
		t.Errorf("BackingFile() = %q, %v; want %q", got, err, path)
	}
	if got, err := loop.Lookup(path); err != nil || len(got) != 1 || got[0] != d.Path() {
		t.Errorf("Lookup(%s) = %v, %v; want [%s]", path, got, err, d.Path())
	}
	if got, err := loop.Lookup(path + ".other"); err != nil || len(got) != 0 {
		t.Errorf("Lookup of an unattached file = %v, %v; want none", got, err)
	}
	status, err := o.Status()
	if err != nil {
		t.Fatal(err)
	}
	var bst unix.Stat_t
	if err := unix.Stat(path, &bst); err != nil {
		t.Fatal(err)
	}
	if status.BackingInode != bst.Ino || status.BackingDev != bst.Dev || status.Number != d.Number() {
		t.Errorf("Status() = %+v, backing file is dev %#x inode %d", status, bst.Dev, bst.Ino)
	}

	for _, p := range []string{"/dev/null", path} {
		if _, err := loop.Open(p); !errors.Is(err, loop.ErrNotLoop) {
			t.Errorf("Open(%s): %v, want ErrNotLoop", p, err)
		}
	}
	if _, err := loop.Open("/dev/does-not-exist"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing path: %v, want ErrNotExist", err)
	}
}

func TestAutoclearOnClose(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{Autoclear: true})
	if flags, err := d.Flags(); err != nil || !flags.Autoclear {
		t.Fatalf("Flags() = %+v, %v; want autoclear", flags, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	waitUnbound(t, path)
}

// waitUnbound fails the test unless no loop device serves path within 10
// seconds (the kernel may finish an autoclear detach asynchronously, and
// slowly under TCG or while udev still holds the device).
func waitUnbound(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := boundTo(t, path)
		if len(got) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still served by %v", path, got)
		}
	}
}

// servesOther reports whether loopN is bound to a file other than path:
// then another test (or program) reused the number after we freed it, which
// is legitimate when packages run in parallel.
func servesOther(n int, path string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n))
	return err == nil && strings.TrimSpace(string(b)) != path
}

// boundTo lists the loop devices whose backing file is path. It reads
// sysfs itself rather than through Lookup or Bindings, so the tests of
// those have an independent witness.
func boundTo(t testing.TB, path string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(b)) == path {
			devs = append(devs, strings.Split(f, "/")[3])
		}
	}
	return devs
}

func TestRemoveLeavesNoDevice(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{DirectIO: true})
	if got := boundTo(t, path); len(got) != 1 {
		t.Fatalf("devices bound to the backing file: %v, want one", got)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if got := boundTo(t, path); len(got) != 0 {
		t.Errorf("devices still bound after Remove: %v", got)
	}
	if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d", d.Number())); !errors.Is(err, os.ErrNotExist) && !servesOther(d.Number(), path) {
		t.Errorf("/sys/block/loop%d still exists after Remove (stat: %v)", d.Number(), err)
	}
}

func TestDetachKeepsDeviceForReuse(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{})
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	if got := boundTo(t, path); len(got) != 0 {
		t.Errorf("devices still bound after Detach: %v", got)
	}
	if _, err := d.Status(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Status after Detach: %v, want ErrClosed", err)
	}
	o, err := loop.Open(d.Path())
	if err != nil {
		t.Fatalf("the detached device should stay for reuse: %v", err)
	}
	defer o.Close()
	if _, err := o.Status(); !errors.Is(err, loop.ErrDetached) && !servesOther(d.Number(), path) {
		t.Errorf("Status of the detached device: %v, want ErrDetached", err)
	}
}

func TestRemoveWhileOpenElsewhere(t *testing.T) {
	ktest.RequireRoot(t)
	path := backing(t, "", 8*MiB)
	d := create(t, path, loop.Options{})
	other, err := os.Open(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	err = d.Remove()
	if !errors.Is(err, unix.EBUSY) {
		t.Errorf("Remove while another process has the device open: %v, want EBUSY", err)
	}
	// The kernel detaches once the other opener is gone.
	other.Close()
	if got := boundTo(t, path); len(got) != 0 {
		t.Errorf("still bound after the other opener closed: %v", got)
	}
}

// TestConcurrentCreate runs many Create/Remove cycles at once: no two live
// devices may share a number, and nothing may be left behind.
func TestConcurrentCreate(t *testing.T) {
	ktest.RequireRoot(t)
	dir := t.TempDir()
	const workers, rounds = 8, 10
	var (
		mu   sync.Mutex
		live = map[int]string{}
		wg   sync.WaitGroup
	)
	for w := range workers {
		path := backing(t, dir, MiB)
		wg.Go(func() {
			for range rounds {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Error(err)
					return
				}
				d, err := loop.Create(f, loop.Options{})
				f.Close()
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				mu.Lock()
				if other, dup := live[d.Number()]; dup {
					t.Errorf("loop%d handed to %s and %s at once", d.Number(), other, path)
				}
				live[d.Number()] = path
				mu.Unlock()
				if got, err := d.BackingFile(); err != nil || got != path {
					t.Errorf("loop%d backs %q (%v), want %q", d.Number(), got, err, path)
				}
				mu.Lock()
				delete(live, d.Number())
				mu.Unlock()
				if err := d.Remove(); err != nil {
					t.Errorf("worker %d: %v", w, err)
				}
			}
		})
	}
	wg.Wait()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if got := boundTo(t, filepath.Join(dir, e.Name())); len(got) != 0 {
			t.Errorf("%s still bound to %v", e.Name(), got)
		}
	}
}

// unusedNumber returns a loop number no device has now, well above the
// existing ones, so a concurrent Create (which takes the lowest free or
// unused number) is unlikely to take it first.
func unusedNumber(t *testing.T) int {
	t.Helper()
	dirs, err := filepath.Glob("/sys/devices/virtual/block/loop*")
	if err != nil {
		t.Fatal(err)
	}
	highest := -1
	for _, d := range dirs {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "loop")); err == nil {
			highest = max(highest, n)
		}
	}
	n := highest + 64
	if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d", n)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("loop%d exists already (%v)", n, err)
	}
	return n
}

// TestCreateAtBindsTheChosenNumber: CreateAt makes a device that does not
// exist yet, rebinds a detached one under its very number and device
// number, and never takes over a device that serves a file.
func TestCreateAtBindsTheChosenNumber(t *testing.T) {
	ktest.RequireRoot(t)
	open := func(path string) *os.File {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	first, second := backing(t, "", MiB), backing(t, "", 2*MiB)

	n := unusedNumber(t)
	d, err := loop.CreateAt(n, open(first), loop.Options{})
	if err != nil {
		t.Fatalf("CreateAt(%d) of a device that does not exist: %v", n, err)
	}
	t.Cleanup(func() {
		// loopN, and whatever device serves the two files (even when
		// CreateAt took another number than asked).
		d.Close()
		for _, f := range []string{first, second} {
			devs, _ := loop.Lookup(f)
			for _, p := range append(devs, fmt.Sprintf("/dev/loop%d", n)) {
				if o, err := loop.Open(p); err == nil {
					if err := o.Remove(); err != nil {
						t.Errorf("cleanup: %v", err)
					}
				}
			}
		}
	})
	if d.Number() != n || d.Path() != fmt.Sprintf("/dev/loop%d", n) {
		t.Fatalf("CreateAt(%d) gave %s (number %d)", n, d.Path(), d.Number())
	}
	if got := boundTo(t, first); len(got) != 1 || got[0] != fmt.Sprintf("loop%d", n) {
		t.Fatalf("%s is served by %v, want loop%d", first, got, n)
	}
	dev := d.Dev()

	// A bound device is not taken over, and keeps serving its file.
	if o, err := loop.CreateAt(n, open(second), loop.Options{}); !errors.Is(err, unix.EBUSY) {
		if err == nil {
			o.Detach()
		}
		t.Fatalf("CreateAt(%d) over a bound device: %v, want EBUSY", n, err)
	}
	if got, err := d.BackingFile(); err != nil || got != first {
		t.Fatalf("after the refused CreateAt, loop%d backs %q (%v), want %q", n, got, err, first)
	}

	// Detached, the same number (and so the same device number) takes
	// another file.
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	again, err := loop.CreateAt(n, open(second), loop.Options{})
	if err != nil {
		t.Fatalf("CreateAt(%d) of the detached device: %v", n, err)
	}
	t.Cleanup(func() { again.Close() })
	if again.Number() != n || again.Dev() != dev {
		t.Errorf("rebound device: number %d dev %#x, want %d and %#x", again.Number(), again.Dev(), n, dev)
	}
	if got, err := again.BackingFile(); err != nil || got != second {
		t.Errorf("rebound loop%d backs %q (%v), want %q", n, got, err, second)
	}
	if size, err := again.Size(); err != nil || size != 2*MiB {
		t.Errorf("rebound loop%d has %d bytes (%v), want the new file's %d", n, size, err, 2*MiB)
	}
	if err := again.Remove(); err != nil {
		t.Fatal(err)
	}

	if _, err := loop.CreateAt(-1, open(first), loop.Options{}); err == nil {
		t.Errorf("CreateAt(-1) succeeded")
	}
	if got := boundTo(t, first); len(got) != 0 {
		t.Errorf("%s still served by %v", first, got)
	}
}
