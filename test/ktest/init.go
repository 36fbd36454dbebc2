package ktest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/kmod"
)

// Paths inside the initramfs, shared by the host runner and the guest init.
const (
	// GuestConfig holds the Config for the VM's init.
	GuestConfig = "/ktest/config.json"
	// GuestModules lists kernel modules to load, in dependency order (a
	// module list, see pkg/kmod).
	GuestModules = "/ktest/modules.list"
	// GuestTestDir holds the test binaries.
	GuestTestDir = "/ktest/tests"
	// guestSkipDir holds, per test binary, the tests that declared their
	// skip expected (SkipExpected).
	guestSkipDir = "/ktest/skips"
)

// Config tells the VM's init what to run.
type Config struct {
	// Nonce makes the result lines unforgeable by test output.
	Nonce string
	// Tests are guest paths of test binaries, run one after another.
	Tests []string
	// Args are passed to every test binary.
	Args []string
	// Timeout bounds each test binary (as -test.timeout).
	Timeout time.Duration
	// TestArgs are arguments for one test binary (by base name), placed
	// before Args so that a -test.run given to every binary overrides
	// a binary's own. test-kernel.sh uses them to run only some tests
	// of a package whose whole run would be too slow under TCG.
	TestArgs map[string][]string
	// Env is added to the test binaries' environment, e.g. where the
	// programs added to the initramfs with the runner's -with are.
	Env []string
}

// Result lines on the console; the host runner parses them.
const (
	resultPrefix  = "KTEST-RESULT"
	packagePrefix = "KTEST-PACKAGE"
	// RunningPrefix starts the line the guest prints before it runs a
	// test binary; the host runner groups the console by it.
	RunningPrefix = "ktest-init: running "
)

// ResultLine is the final line the guest prints: the exit status of the
// whole run.
func ResultLine(nonce string, code int) string {
	return fmt.Sprintf("%s %s exit=%d", resultPrefix, nonce, code)
}

// ParseResult recognises a ResultLine with the given nonce.
func ParseResult(line, nonce string) (code int, ok bool) {
	i := strings.Index(line, resultPrefix+" "+nonce+" exit=")
	if i < 0 {
		return 0, false
	}
	_, err := fmt.Sscanf(line[i:], resultPrefix+" "+nonce+" exit=%d", &code)
	return code, err == nil
}

// PackageLine is printed after each test binary ends.
func PackageLine(nonce, name string, code int) string {
	return fmt.Sprintf("%s %s %s exit=%d", packagePrefix, nonce, name, code)
}

// ParsePackage recognises a PackageLine with the given nonce.
func ParsePackage(line, nonce string) (name string, code int, ok bool) {
	i := strings.Index(line, packagePrefix+" "+nonce+" ")
	if i < 0 {
		return "", 0, false
	}
	_, err := fmt.Sscanf(line[i+len(packagePrefix)+len(nonce)+2:], "%s exit=%d", &name, &code)
	return name, code, err == nil
}

// Exit codes of the guest beyond the tests' own.
const (
	// ExitSetup: init could not prepare the VM (module, disk, mount).
	ExitSetup = 120
	// ExitNoTest: a test binary could not be started.
	ExitNoTest = 121
	// ExitSkip: a test binary passed, but some of its tests skipped
	// without SkipExpected.
	ExitSkip = 122
	// ExitRanNothing: a test binary passed without running a test while
	// the runner, not its user, chose which tests it runs: a pattern
	// that matches nothing (a renamed test) must not pass as green.
	ExitRanNothing = 123
)

// RunInit is the VM's PID 1: it mounts the pseudo filesystems, loads the
// modules, mounts Disks under MountRoot, runs each test binary as a child
// (given here, or listed in GuestConfig), prints the result line and
// powers the VM off. It never returns.
//
// Tests run as children so a panicking test only ends its own process:
// init survives to report the failure. If init itself died, the kernel
// would panic and the host would see no result line, which it also treats
// as failure.
func RunInit(tests ...string) {
	cfg := Config{Timeout: 10 * time.Minute}
	if b, err := os.ReadFile(GuestConfig); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			fmt.Printf("ktest-init: reading %s: %v\n", GuestConfig, err)
			finish(cfg.Nonce, ExitSetup)
		}
	}
	if len(tests) > 0 {
		cfg.Tests = tests
	}
	if err := setupGuest(); err != nil {
		fmt.Printf("ktest-init: setting up the VM: %v\n", err)
		finish(cfg.Nonce, ExitSetup)
	}
	code := 0
	for _, bin := range cfg.Tests {
		c := runTest(bin, cfg, guestSkipDir)
		fmt.Println(PackageLine(cfg.Nonce, filepath.Base(bin), c))
		if c != 0 && code == 0 {
			code = c
		}
	}
	finish(cfg.Nonce, code)
}

// runTest runs one test binary and returns its exit code, or ExitSkip
// when it passed but a test in it skipped without SkipExpected (see the
// package comment).
func runTest(bin string, cfg Config, skipDir string) int {
	args := []string{"-test.v", "-test.count=1", fmt.Sprintf("-test.timeout=%s", cfg.Timeout)}
	args = append(append(args, cfg.TestArgs[filepath.Base(bin)]...), cfg.Args...)
	skips := filepath.Join(skipDir, filepath.Base(bin))
	if err := os.MkdirAll(skipDir, 0o755); err != nil {
		fmt.Printf("ktest-init: %v\n", err)
		return ExitNoTest
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Printf("ktest-init: %v\n", err)
		return ExitNoTest
	}
	cmd.Stderr = cmd.Stdout
	cmd.Dir = "/tmp"
	cmd.Env = append([]string{"PATH=/sbin:/bin", "HOME=/tmp", "TMPDIR=/tmp", envVM + "=1", envSkips + "=" + skips, "CI=" + os.Getenv("CI")}, cfg.Env...)
	fmt.Printf("%s%s %s\n", RunningPrefix, filepath.Base(bin), strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		fmt.Printf("ktest-init: starting %s: %v\n", filepath.Base(bin), err)
		return ExitNoTest
	}
	// Copy the output to the console line by line, noting skips. -test.v
	// above makes the testing package report every skip.
	var skipped []string
	ran := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fmt.Println(sc.Text())
		if name, ok := SkippedTest(sc.Text()); ok {
			skipped = append(skipped, name)
		}
		if StartedTest(sc.Text()) {
			ran++
		}
	}
	if err := sc.Err(); err != nil {
		// Keep draining, or the test blocks on a full pipe.
		fmt.Printf("ktest-init: reading the output of %s: %v\n", filepath.Base(bin), err)
		_, _ = io.Copy(os.Stdout, out)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode()
	case errors.As(err, &ee):
		fmt.Printf("ktest-init: %s: %v\n", filepath.Base(bin), ee)
		return 1
	default:
		fmt.Printf("ktest-init: %s: %v\n", filepath.Base(bin), err)
		return 1
	}
	declared, err := readDeclaredSkips(skips)
	if err != nil {
		fmt.Printf("ktest-init: reading the expected skips of %s: %v\n", filepath.Base(bin), err)
		return ExitSkip
	}
	if bad := UnexpectedSkips(skipped, declared); len(bad) > 0 {
		for _, name := range bad {
			fmt.Printf("ktest-init: %s skipped in the VM, where everything a kernel test needs is present; make it run, or declare the skip with ktest.SkipExpected and the reason\n", name)
		}
		return ExitSkip
	}
	if ran == 0 && !Filtered(cfg.Args) {
		fmt.Printf("ktest-init: %s ran no test with %q: a test it should run was renamed or removed\n", filepath.Base(bin), args)
		return ExitRanNothing
	}
	return 0
}

func setupGuest() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	// Tests that start servers (a control plane) talk over loopback,
	// which the kernel creates down.
	if err := loopbackUp(); err != nil {
		return err
	}
	mods, err := kmod.ReadList(GuestModules)
	if err != nil {
		return err
	}
	for _, m := range mods {
		// Signatures are stripped by the initramfs writer (checking them
		// is slow under TCG); the kernel only taints itself.
		if err := kmod.Load(m); err != nil {
			return err
		}
	}
	for _, d := range Disks() {
		dev, err := findDisk(d.Name, 10*time.Second)
		if err != nil {
			return err
		}
		mnt := filepath.Join(MountRoot, d.Name)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(dev, mnt, d.FS, 0, d.Options); err != nil {
			return fmt.Errorf("mount -t %s -o %q %s %s: %w", d.FS, d.Options, dev, mnt, err)
		}
		fmt.Printf("ktest-init: %s on %s (%s, options %q)\n", dev, mnt, d.FS, d.Options)
	}
	return nil
}

// loopbackUp brings up lo; the kernel gives it 127.0.0.1/8 and ::1 as it
// comes up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up lo: SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up lo: SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// findDisk returns the device node of the virtio disk whose serial is
// name. Disks appear asynchronously after the driver probes them.
func findDisk(name string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		serials, _ := filepath.Glob("/sys/block/vd*/serial")
		for _, s := range serials {
			if b, err := os.ReadFile(s); err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(s))
				return dev, waitFor(dev, time.Until(deadline))
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no disk with serial %q appeared (found %v)", name, serials)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor waits for a device node: devtmpfs creates it when the driver
// has probed the device, which happens asynchronously after module load.
func waitFor(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := os.Stat(path)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func finish(nonce string, code int) {
	fmt.Printf("\n%s\n", ResultLine(nonce, code))
	// The UART drains asynchronously; wait for it, or the result line may
	// be cut off by the power-off.
	_ = unix.IoctlSetInt(1, unix.TCSBRK, 1)
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Printf("ktest-init: power off: %v\n", err)
	}
	for {
		// An empty select would trip Go's deadlock detector and crash init.
		time.Sleep(time.Hour)
	}
}
