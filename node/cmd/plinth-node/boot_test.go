package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"source.plinth.dev/build/microvm"
	"source.plinth.dev/node/core/imagelayout"

	"source.plinth.dev/build/initramfs"
	"source.plinth.dev/pkg/kmod"
)

// The boot tests run plinth-node as what it is on a node: the kernel's
// init, PID 1, in a qemu micro-VM booting the same pinned Debian kernel as
// the kernel tests, with a real XFS data partition. They cover what the
// other tests can only approximate: early mounts on a bare system, module
// loading, the data partition mount with prjquota, quota detection, and
// init powering the machine off when its node fails.

// bootEnv is what a boot needs from the host, prepared once per test run.
type bootEnv struct {
	kernel  string // vmlinux
	modDir  string // lib/modules/<version>
	initrd  string
	disk    string
	workDir string
}

var (
	bootOnce sync.Once
	bootErr  error
	bootSkip string
	theBoot  bootEnv
)

// repoRoot finds the checkout from the test's working directory (the
// package directory under go test).
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module source.plinth.dev\n")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func prepareBoot(t *testing.T) bootEnv {
	t.Helper()
	if os.Getenv("TEST_SRCDIR") != "" {
		// Bazel's sandbox has neither the scripts nor a Go toolchain; the
		// boot tests run in `make test-unit` (go test) instead.
		t.Skip("boot tests run under go test, not Bazel")
	}
	requireRoot(t) // installs packages, like every make target
	bootOnce.Do(func() { theBoot, bootSkip, bootErr = setUpBoot() })
	if bootSkip != "" {
		t.Skip(bootSkip)
	}
	if bootErr != nil {
		t.Fatal(bootErr)
	}
	return theBoot
}

func setUpBoot() (bootEnv, string, error) {
	var e bootEnv
	root, ok := repoRoot()
	if !ok {
		return e, "", fmt.Errorf("boot test: cannot find the repository root from the working directory")
	}
	if out, err := exec.Command(filepath.Join(root, "build/scripts/apt-install.sh"), "qemu-system-x86", "xfsprogs", "lz4").CombinedOutput(); err != nil {
		return e, "", fmt.Errorf("installing qemu and xfsprogs: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(root, "test/ktest/kernel.sh")).Output()
	if err != nil {
		return e, "", fmt.Errorf("getting the test kernel: %v", err)
	}
	kdir := strings.TrimSpace(string(out))
	e.kernel = filepath.Join(kdir, "vmlinux")
	mods, _ := filepath.Glob(filepath.Join(kdir, "lib/modules/*"))
	if len(mods) != 1 {
		return e, "", fmt.Errorf("expected one module directory in %s, found %q", kdir, mods)
	}
	e.modDir = mods[0]

	e.workDir, err = os.MkdirTemp("", "plinth-boot-")
	if err != nil {
		return e, "", err
	}
	// The Makefile puts /usr/local/go/bin on PATH; fall back to it for a
	// bare `go test` from a shell without it.
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	bin := filepath.Join(e.workDir, "plinth-node")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return e, "", fmt.Errorf("building a static plinth-node: %v\n%s", err, out)
	}
	if e.initrd, err = writeInitrd(e.workDir, bin, e.modDir); err != nil {
		return e, "", err
	}
	e.disk = filepath.Join(e.workDir, "data.img")
	f, err := os.Create(e.disk)
	if err != nil {
		return e, "", err
	}
	// mkfs.xfs refuses less than 300 MB; the image is sparse.
	err = f.Truncate(512 << 20)
	f.Close()
	if err != nil {
		return e, "", err
	}
	if out, err := exec.Command("mkfs.xfs", "-q", "-f", e.disk).CombinedOutput(); err != nil {
		return e, "", fmt.Errorf("mkfs.xfs: %v\n%s", err, out)
	}
	return e, "", nil
}

// writeInitrd packs plinth-node as /init with what the bare VM needs: a
// console node (without it the kernel gives init no descriptors), the
// virtio and XFS modules and the list init loads them from.
func writeInitrd(work, bin, modDir string) (string, error) {
	initBin, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	mods, err := initramfs.Modules(modDir, []string{"virtio_mmio", "virtio_blk", "xfs"})
	if err != nil {
		return "", err
	}
	p := filepath.Join(work, "initrd.cpio")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	w := initramfs.NewWriter(f)
	w.CharDev("dev/console", 5, 1)
	w.Dir("tmp")
	w.File("init", 0o755, initBin)
	var list []string
	for _, m := range mods {
		ko, err := os.ReadFile(m.Path)
		if err != nil {
			return "", err
		}
		name := imagelayout.ModuleDir + "/" + m.Name + ".ko"
		w.File(name, 0o644, initramfs.StripSignature(ko))
		list = append(list, name)
	}
	w.File(imagelayout.ModuleList, 0o644, kmod.FormatList(list))
	if err := w.Close(); err != nil {
		return "", err
	}
	return p, f.Close()
}

// vm is a booted VM whose console the test reads: every line since the
// boot, in order (microvm's WaitLine only sees lines printed after it is
// called, and a test expects a sequence that may already have begun).
type vm struct {
	*microvm.VM
	mu    sync.Mutex
	log   strings.Builder
	lines chan string
}

// Write is the VM's console; microvm writes one line per call.
func (v *vm) Write(p []byte) (int, error) {
	v.mu.Lock()
	v.log.Write(p)
	v.mu.Unlock()
	select {
	case v.lines <- strings.TrimSuffix(string(p), "\n"):
	default: // a console that outran the test; the log still has it
	}
	return len(p), nil
}

// boot starts the VM with the given kernel command-line settings and
// arguments for init (the words after "--").
func boot(t *testing.T, e bootEnv, settings []string, initArgs ...string) *vm {
	t.Helper()
	return bootVM(t, microvm.Config{Kernel: e.kernel, Initrd: e.initrd, Memory: "512M", CPUs: 1,
		Disks: []microvm.Disk{{Path: e.disk, Snapshot: true}}}, settings, initArgs...)
}

// bootVM starts the VM c with the given kernel command-line settings and
// arguments for init; c's console is the test's.
func bootVM(t *testing.T, c microvm.Config, settings []string, initArgs ...string) *vm {
	t.Helper()
	v := &vm{lines: make(chan string, 1<<16)}
	// loglevel=3 keeps the console to what the tests read; a setting may
	// raise it (the last loglevel wins).
	c.KernelArgs = append([]string{"loglevel=3"}, settings...)
	c.InitArgs = initArgs
	c.Console = v
	var err error
	if v.VM, err = microvm.Start(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Kill(); err != nil {
			t.Error(err)
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("VM console:\n%s", v.console())
		}
	})
	return v
}

func (v *vm) console() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.log.String()
}

// expect waits for console lines containing each of want, in order. The
// limit only catches a hung VM (TCG boots in seconds); it is no speed goal.
func (v *vm) expect(t *testing.T, want ...string) {
	t.Helper()
	v.expectWithin(t, 2*time.Minute, want...)
}

// expectWithin is expect with a limit of its own.
func (v *vm) expectWithin(t *testing.T, limit time.Duration, want ...string) {
	t.Helper()
	timeout := time.After(limit)
	for _, w := range want {
		for found := false; !found; {
			select {
			case l := <-v.lines:
				found = strings.Contains(l, w)
			case <-v.Done():
				// Every line was written before qemu's end was seen:
				// read what is left before giving up.
				select {
				case l := <-v.lines:
					found = strings.Contains(l, w)
				default:
					t.Fatalf("VM ended before the console showed %q", w)
				}
			case <-timeout:
				t.Fatalf("console did not show %q within %s", w, limit)
			}
		}
	}
}

func TestBootAsPID1(t *testing.T) {
	e := prepareBoot(t)
	v := boot(t, e, []string{"plinth.data=/dev/vda", "plinth.hostname=boot-node", "plinth.onfailure=poweroff", "plinth.haltdelay=0s"})
	v.expect(t,
		"node process",                    // init started the node as its child
		"mounted data partition /dev/vda", // the node mounted the real disk
		"project quotas enforced",         // XFS with prjquota, probed for real
		"node boot-node is up",            // the root runnable is healthy
	)
	if strings.Contains(v.console(), "Kernel panic") {
		t.Error("kernel panic on the console")
	}
}

func TestBootFailurePowersOff(t *testing.T) {
	e := prepareBoot(t)
	// A flag the node refuses: it exits 2, and init must power the
	// machine off (plinth.onfailure=poweroff), ending qemu by itself.
	v := boot(t, e, []string{"plinth.onfailure=poweroff", "plinth.haltdelay=0s", "plinth.hostname=boot-fail"}, "--no-such-flag")
	v.expect(t, "powering off in 0s: node process failed: exit status 2", "reboot: Power down")
	select {
	case <-v.Done():
		if err := v.Err(); err != nil {
			t.Errorf("qemu exited with %v after the guest powered off", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the VM did not power off")
	}
	if strings.Contains(v.console(), "Kernel panic") {
		t.Error("kernel panic: init exited instead of powering off")
	}
}

func TestBootCleanShutdownPowersOff(t *testing.T) {
	e := prepareBoot(t)
	// loglevel=5 shows the kernel's XFS unmount notice.
	v := boot(t, e, []string{"plinth.data=/dev/vda", "plinth.hostname=boot-stop", "plinth.onfailure=reboot", "sysrq_always_enabled", "loglevel=5"})
	v.expect(t, "node boot-stop is up")
	// SysRq-e sends SIGTERM to every process but init: the node gets the
	// signal a service manager would send, must stop cleanly and exit 0,
	// and init must then power off (not reboot, which with -no-reboot
	// would also end qemu but is reported differently).
	if err := v.SysRq('e'); err != nil {
		t.Fatal(err)
	}
	v.expect(t, "shutting down", "stopped cleanly", "powering off in 0s: node process exited cleanly", "XFS (vda): Unmounting Filesystem", "reboot: Power down")
	select {
	case <-v.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("the VM did not power off")
	}
}
