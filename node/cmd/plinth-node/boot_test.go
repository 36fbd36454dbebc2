package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"source.plinth.dev/build/microvm"

	"source.plinth.dev/build/ktest/initramfs"
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
	out, err := exec.Command(filepath.Join(root, "build/ktest/kernel.sh")).Output()
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
		name := "/lib/modules/" + m.Name + ".ko"
		w.File(name, 0o644, initramfs.StripSignature(ko))
		list = append(list, name)
	}
	w.File(bootModuleList, 0o644, kmod.FormatList(list))
	if err := w.Close(); err != nil {
		return "", err
	}
	return p, f.Close()
}

// vm is a booted VM whose console the test reads.
type vm struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	log    strings.Builder
	lines  chan string
	exited chan error
}

// boot starts the VM with the given kernel command-line settings and
// arguments for init (the words after "--").
func boot(t *testing.T, e bootEnv, settings []string, initArgs ...string) *vm {
	t.Helper()
	return bootVM(t, vmConfig{kernel: e.kernel, initrd: e.initrd, memory: "512M", cpus: 1, disks: []string{e.disk}, snapshot: true}, settings, initArgs...)
}

// vmConfig is the machine bootVM starts.
type vmConfig struct {
	kernel, initrd string
	memory         string
	cpus           int
	// disks are virtio-blk devices, raw images; with snapshot their
	// writes are discarded.
	disks    []string
	snapshot bool
	// net adds a virtio-net device on qemu's user network (slirp:
	// guest 10.0.2.15/24, gateway 10.0.2.2).
	net bool
}

// bootVM starts a VM of c with the given kernel command-line settings and
// arguments for init.
func bootVM(t *testing.T, c vmConfig, settings []string, initArgs ...string) *vm {
	t.Helper()
	kargs := append([]string{
		"console=ttyS0", "loglevel=3", "panic=-1", "mitigations=off", "no_timer_check", "random.trust_cpu=on",
		"i8042.noaux", "i8042.nomux", "i8042.nopnp", "i8042.dumbkbd",
	}, settings...)
	// microvm lacks the timers the kernel calibrates the TSC with; under
	// TCG the guest reads the host's TSC, so pass its rate.
	if khz := microvm.HostTSCkHz(); khz > 0 {
		kargs = append(kargs, "tsc_early_khz="+strconv.Itoa(khz))
	}
	if len(initArgs) > 0 {
		kargs = append(append(kargs, "--"), initArgs...)
	}
	args := []string{
		"-machine", "microvm", "-accel", "tcg", "-cpu", "max", "-m", c.memory, "-smp", strconv.Itoa(c.cpus),
		// mon:stdio multiplexes qemu's monitor on the console, so that
		// "Ctrl-a b" on stdin sends a serial break (see sysrq).
		"-nographic", "-nodefaults", "-no-reboot", "-serial", "mon:stdio",
		"-kernel", c.kernel, "-initrd", c.initrd, "-append", strings.Join(kargs, " "),
	}
	if c.snapshot {
		args = append(args, "-snapshot")
	}
	for i, d := range c.disks {
		id := fmt.Sprintf("d%d", i)
		args = append(args, "-drive", "id="+id+",file="+d+",if=none,format=raw,cache=unsafe", "-device", "virtio-blk-device,drive="+id)
	}
	if c.net {
		args = append(args, "-netdev", "user,id=n0", "-device", "virtio-net-device,netdev=n0")
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	v := &vm{cmd: cmd, stdin: in, lines: make(chan string, 1<<16), exited: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := strings.TrimRight(sc.Text(), "\r")
			v.mu.Lock()
			v.log.WriteString(l + "\n")
			v.mu.Unlock()
			select {
			case v.lines <- l:
			default:
			}
		}
		// Closing lines after the last one lets expect read everything
		// the VM printed before it ended.
		close(v.lines)
		v.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-v.exited
		if t.Failed() || testing.Verbose() {
			t.Logf("VM console:\n%s", v.console())
		}
	})
	return v
}

// sysrq sends the magic SysRq key to the guest kernel: a serial break
// (qemu's "Ctrl-a b") followed by the key. It needs sysrq_always_enabled
// on the kernel command line.
func (v *vm) sysrq(t *testing.T, key byte) {
	t.Helper()
	if _, err := v.stdin.Write([]byte{0x01, 'b'}); err != nil {
		t.Fatal(err)
	}
	// The kernel takes the key that follows the break as the command.
	time.Sleep(200 * time.Millisecond)
	if _, err := v.stdin.Write([]byte{key}); err != nil {
		t.Fatal(err)
	}
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
			case l, ok := <-v.lines:
				if !ok {
					t.Fatalf("VM ended before the console showed %q", w)
				}
				found = strings.Contains(l, w)
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case err := <-v.exited:
		v.exited <- err
		if err != nil {
			t.Errorf("qemu exited with %v after the guest powered off", err)
		}
	case <-ctx.Done():
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
	v.sysrq(t, 'e')
	v.expect(t, "shutting down", "stopped cleanly", "powering off in 0s: node process exited cleanly", "XFS (vda): Unmounting Filesystem", "reboot: Power down")
	select {
	case err := <-v.exited:
		v.exited <- err
	case <-time.After(2 * time.Minute):
		t.Fatal("the VM did not power off")
	}
}
