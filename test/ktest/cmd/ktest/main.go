// Command ktest boots test binaries in a qemu micro-VM on a given kernel and
// exits with their combined status.
//
//	ktest -kernel vmlinux -modules lib/modules/<version> a.test b.test [-- -test.run=X]
//
// It makes fresh disk images (ktest.Disks), packs an initramfs whose /init
// is this very binary (built static, it becomes the VM's init when it runs
// as PID 1), the test binaries and the kernel modules, boots qemu with the
// serial console on stdout and parses the guest's result line.
//
// Tests that run host programs in the VM (the controller tests start etcd,
// kube-apiserver and kube-controller-manager) get them with -with: each
// program lands at its host path, with the shared libraries it needs
// (initramfs.LibSearch), and -env tells the tests where to look.
//
// Exit status: the guest's (0 when every test binary passed), 124 on
// timeout, 125 when the VM ended without a result (it could not start, or
// init died), 2 on bad usage or host-side errors.
package main

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"source.plinth.dev/build/initramfs"
	"source.plinth.dev/build/microvm"
	"source.plinth.dev/pkg/kmod"
	"source.plinth.dev/test/ktest"
)

// modules are what the VM needs beyond the built-in drivers: virtio disks
// on the microvm machine, XFS, loop devices and the quota format ext4's
// hidden quota files use.
var modules = []string{"virtio_mmio", "virtio_blk", "xfs", "loop", "quota_v2"}

// guestMounts are the directories the VM's init mounts filesystems on
// (ktest.RunInit), hiding what the initramfs has there.
var guestMounts = []string{"/proc", "/sys", "/dev", "/tmp", ktest.MountRoot}

const (
	exitUsage    = 2
	exitTimeout  = 124
	exitNoResult = 125
)

type options struct {
	kernel, modDir, logFile, workDir string
	initBin                          string
	timeout, testTimeout             time.Duration
	memory                           string
	cpus                             int
	tests, args                      []string
	// with are host programs copied in at their own paths.
	with []string
	// env is added to the test binaries' environment.
	env []string
	// testArgs are arguments of one test binary, by base name.
	testArgs map[string][]string
}

func main() {
	if os.Getpid() == 1 {
		ktest.RunInit()
	}
	var o options
	flag.StringVar(&o.kernel, "kernel", "", "kernel image qemu can boot with -machine microvm (an uncompressed vmlinux, PVH)")
	flag.StringVar(&o.modDir, "modules", "", "lib/modules/<version> directory of the same kernel")
	flag.StringVar(&o.logFile, "log", "", "also write the console to this file")
	flag.StringVar(&o.initBin, "init", "", "static binary to boot as /init instead of this one (a test binary using ktest.Main runs itself)")
	flag.StringVar(&o.workDir, "workdir", "", "directory for disk images and the initramfs (default: a temporary one, removed afterwards)")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "time limit for the whole VM run")
	flag.DurationVar(&o.testTimeout, "test-timeout", 10*time.Minute, "time limit for each test binary (-test.timeout)")
	flag.StringVar(&o.memory, "m", "1G", "VM memory")
	flag.IntVar(&o.cpus, "smp", 2, "VM CPUs")
	flag.Func("with", "host program to put into the VM at its own path, with its shared libraries (repeatable)", func(v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%s: want an absolute path", v)
		}
		for _, m := range guestMounts {
			if v == m || strings.HasPrefix(v, m+"/") {
				return fmt.Errorf("%s: the VM mounts %s over the initramfs, which would hide it; put the program elsewhere", v, m)
			}
		}
		o.with = append(o.with, v)
		return nil
	})
	flag.Func("env", "NAME=VALUE added to the test binaries' environment (repeatable)", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q: want NAME=VALUE", v)
		}
		o.env = append(o.env, v)
		return nil
	})
	o.testArgs = map[string][]string{}
	flag.Func("test-arg", "NAME.test=ARG: an argument for one test binary only, before the common TEST-ARGS (repeatable)", func(v string) error {
		name, arg, ok := strings.Cut(v, "=")
		if !ok || !strings.HasSuffix(name, ".test") {
			return fmt.Errorf("%q: want NAME.test=ARG", v)
		}
		o.testArgs[name] = append(o.testArgs[name], arg)
		return nil
	})
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s -kernel VMLINUX -modules DIR TEST.test... [-- TEST-ARGS...]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	rest := flag.Args()
	for i, a := range rest {
		if a == "--" {
			o.tests, o.args = rest[:i], rest[i+1:]
			break
		}
	}
	if o.tests == nil {
		o.tests = rest
	}
	if o.kernel == "" || o.modDir == "" || len(o.tests) == 0 {
		flag.Usage()
		os.Exit(exitUsage)
	}
	code, err := run(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ktest: %v\n", err)
	}
	os.Exit(code)
}

func run(o options) (int, error) {
	work := o.workDir
	if work == "" {
		d, err := os.MkdirTemp("", "ktest-")
		if err != nil {
			return exitUsage, err
		}
		defer os.RemoveAll(d)
		work = d
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return exitUsage, err
	}
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return exitUsage, err
	}
	cfg := ktest.Config{Nonce: hex.EncodeToString(nonce), Args: o.args, Timeout: o.testTimeout, TestArgs: o.testArgs, Env: o.env}
	initrd := filepath.Join(work, "initramfs.cpio")
	if err := writeInitramfs(initrd, o, &cfg); err != nil {
		return exitUsage, fmt.Errorf("writing initramfs: %w", err)
	}
	disks, err := makeDisks(work)
	if err != nil {
		return exitUsage, err
	}
	return boot(o, cfg.Nonce, initrd, disks)
}

func writeInitramfs(out string, o options, cfg *ktest.Config) error {
	self := o.initBin
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := checkStatic(self); err != nil {
		return err
	}
	initBin, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	mods, err := initramfs.Modules(o.modDir, modules)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := initramfs.NewWriter(f)
	w.CharDev("dev/console", 5, 1)
	for _, d := range []string{"proc", "sys", "tmp", ktest.MountRoot} {
		w.Dir(d)
	}
	w.File("init", 0o755, initBin)
	var list []string
	for _, m := range mods {
		ko, err := os.ReadFile(m.Path)
		if err != nil {
			return err
		}
		p := "/ktest/modules/" + m.Name + ".ko"
		w.File(p, 0o644, initramfs.StripSignature(ko))
		list = append(list, p)
	}
	w.File(ktest.GuestModules, 0o644, kmod.FormatList(list))
	if err := addPrograms(w, o.with); err != nil {
		return err
	}
	seen := map[string]bool{}
	for name := range o.testArgs {
		if !slices.ContainsFunc(o.tests, func(t string) bool { return filepath.Base(t) == name }) {
			return fmt.Errorf("-test-arg for %s, which is not among the test binaries", name)
		}
	}
	for _, t := range o.tests {
		name := filepath.Base(t)
		if seen[name] {
			return fmt.Errorf("two test binaries called %s", name)
		}
		seen[name] = true
		if err := checkStatic(t); err != nil {
			return err
		}
		b, err := os.ReadFile(t)
		if err != nil {
			return err
		}
		p := ktest.GuestTestDir + "/" + name
		w.File(p, 0o755, b)
		cfg.Tests = append(cfg.Tests, p)
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	w.File(ktest.GuestConfig, 0o644, cb)
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// addPrograms writes host programs at their own paths, with the shared
// libraries and program interpreter each needs, as the loader in the VM
// will look them up.
func addPrograms(w *initramfs.Writer, programs []string) error {
	if len(programs) == 0 {
		return nil
	}
	libs, err := initramfs.LibSearch{}.Libraries(programs)
	if err != nil {
		return err
	}
	for _, l := range libs {
		if l.Link != "" {
			w.Symlink(l.Path, l.Link)
			continue
		}
		b, err := os.ReadFile(l.Source)
		if err != nil {
			return err
		}
		w.File(l.Path, 0o755, b)
	}
	for _, p := range programs {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		w.File(p, 0o755, b)
	}
	return nil
}

// checkStatic fails for a dynamically linked binary: the VM has no libc or
// dynamic loader, and the kernel's "No such file" on exec would not say so.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// makeDisks formats a fresh sparse image for each ktest.Disks entry.
func makeDisks(work string) ([]string, error) {
	var paths []string
	for _, d := range ktest.Disks() {
		p := filepath.Join(work, d.Name+".img")
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		err = f.Truncate(d.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("creating disk image %s: %w", p, err)
		}
		cmd := exec.Command(d.Mkfs[0], append(d.Mkfs[1:], p)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("formatting disk %s: %s: %w\n%s", d.Name, strings.Join(cmd.Args, " "), err, out)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func boot(o options, nonce, initrd string, disks []string) (int, error) {
	names := ktest.Disks()
	vmDisks := make([]microvm.Disk, len(disks))
	for i, p := range disks {
		// The serial names the disk inside the VM (/sys/block/vdX/serial),
		// so init does not depend on probe order; writes go to a temporary
		// overlay, so the images stay pristine.
		vmDisks[i] = microvm.Disk{Path: p, Serial: names[i].Name, Snapshot: true}
	}
	var log io.Writer = io.Discard
	if o.logFile != "" {
		lf, err := os.Create(o.logFile)
		if err != nil {
			return exitUsage, err
		}
		defer lf.Close()
		log = lf
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	start := time.Now()
	results := &resultWriter{nonce: nonce, start: start, log: log}
	vm, err := microvm.Start(ctx, microvm.Config{
		Kernel:     o.kernel,
		Initrd:     initrd,
		KernelArgs: []string{"quiet", "loglevel=3", "oops=panic"},
		Memory:     o.memory,
		CPUs:       o.cpus,
		Disks:      vmDisks,
		Console:    results,
	})
	if err != nil {
		return exitNoResult, err
	}
	werr := vm.Err()
	for _, l := range slices.Concat(results.summary, results.details) {
		fmt.Fprintln(os.Stderr, l)
	}
	fmt.Fprintf(os.Stderr, "ktest: VM ran %.1fs\n", time.Since(start).Seconds())
	switch {
	case ctx.Err() != nil:
		return exitTimeout, fmt.Errorf("VM did not finish within %v", o.timeout)
	case !results.haveResult:
		return exitNoResult, fmt.Errorf("VM ended without a result line (qemu: %v): it failed to boot or its init died", werr)
	case results.code != 0:
		return results.code, fmt.Errorf("tests in the VM failed (exit %d)", results.code)
	}
	return 0, nil
}

// resultWriter takes the console line by line (microvm writes each in one
// call): it prints each with the time since boot, and collects the
// guest's result and per-package lines. A package's verdict goes to the
// summary; for a package that failed, details repeats what explains it
// (see failures). Both are printed after the run, the details last,
// because the last lines are what a CI log's tail shows.
type resultWriter struct {
	nonce      string
	start      time.Time
	log        io.Writer
	code       int
	haveResult bool
	summary    []string
	details    []string
	pkgLines   []string // the console since the current package started
}

func (r *resultWriter) Write(b []byte) (int, error) {
	line := strings.TrimSuffix(string(b), "\n")
	stamped := fmt.Sprintf("[%7.3f] %s\n", time.Since(r.start).Seconds(), line)
	os.Stdout.WriteString(stamped)
	io.WriteString(r.log, stamped)
	if c, ok := ktest.ParseResult(line, r.nonce); ok {
		r.code, r.haveResult = c, true
	}
	if strings.HasPrefix(line, ktest.RunningPrefix) {
		r.pkgLines = r.pkgLines[:0]
	}
	r.pkgLines = append(r.pkgLines, line)
	if name, c, ok := ktest.ParsePackage(line, r.nonce); ok {
		verdict := "ok"
		switch c {
		case 0:
		case ktest.ExitSkip:
			verdict = fmt.Sprintf("FAIL (exit %d: tests skipped without ktest.SkipExpected)", c)
		case ktest.ExitRanNothing:
			verdict = fmt.Sprintf("FAIL (exit %d: ran no test)", c)
		default:
			verdict = fmt.Sprintf("FAIL (exit %d)", c)
		}
		r.summary = append(r.summary, fmt.Sprintf("ktest: %-40s %s", name, verdict))
		if c != 0 {
			r.details = append(r.details, "ktest: "+name+" failed:")
			for _, l := range failures(r.pkgLines) {
				r.details = append(r.details, "ktest:   | "+l)
			}
		}
	}
	return len(b), nil
}

// maxFailureLines bounds what failures repeats of one package, and
// maxMessageLines what it repeats of one message a test logged.
const (
	maxFailureLines = 60
	maxMessageLines = 12
)

// failures picks from a package's -test.v output what explains its
// failure. For each failed test (from its "=== RUN" to its "--- FAIL",
// each line once: a parent's block holds its subtests'), that is the last
// lines before the verdict, then every message the test logged through
// testing.T ("x_test.go:N: ..." and its indented continuation lines, up
// to maxMessageLines of one message), then the verdict: the reasons come
// last, after whatever long dump (a process's log tail) preceded them, so
// that a bounded tail of the output still holds them. Output with no
// "--- FAIL" (a panic, a timeout) is shown by its last lines.
func failures(lines []string) []string {
	start := map[string]int{}
	var out []string
	shown, cutShown := map[int]bool{}, map[int]bool{}
	show := func(j int) {
		if !shown[j] {
			shown[j] = true
			out = append(out, lines[j])
		}
	}
	for i, l := range lines {
		if name, ok := strings.CutPrefix(l, "=== RUN   "); ok {
			start[strings.TrimSpace(name)] = i
			continue
		}
		rest, ok := strings.CutPrefix(strings.TrimLeft(l, " "), "--- FAIL: ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		from, ok := start[name]
		if !ok {
			from = i
		}
		kind := messageLines(lines[from:i])
		context := max(from, i-maxFailureLines/4)
		for j := context; j < i; j++ {
			if kind[j-from] == notMessage {
				show(j)
			}
		}
		cut := 0 // lines of the current message left out so far
		for j := from; j < i; j++ {
			switch kind[j-from] {
			case message:
				show(j)
			case messageCut:
				cut++
				// Said after the last line left out, once (a parent's
				// block holds its subtests' messages again).
				if (j+1 == i || kind[j+1-from] != messageCut) && !cutShown[j] {
					cutShown[j] = true
					out = append(out, fmt.Sprintf("        ... (%d more lines)", cut))
				}
			}
			if kind[j-from] != messageCut {
				cut = 0
			}
		}
		show(i)
	}
	if len(out) == 0 {
		out = lines[max(0, len(lines)-maxFailureLines/2):]
	}
	if len(out) > maxFailureLines {
		out = append([]string{"..."}, out[len(out)-maxFailureLines:]...)
	}
	return out
}

// The kinds of line messageLines tells apart.
const (
	notMessage = iota
	message    // a line of a message a test logged
	messageCut // a line of such a message past maxMessageLines
)

// messageLines tells apart in a test's output the lines of the messages
// it logged through testing.T: a line "x_test.go:N: ..." and the lines
// after it indented deeper (the rest of a multi-line message), of which
// the first maxMessageLines are kept.
func messageLines(lines []string) []int {
	kind := make([]int, len(lines))
	for j := 0; j < len(lines); j++ {
		if !testLine.MatchString(lines[j]) {
			continue
		}
		kind[j] = message
		indent := indentOf(lines[j])
		for k, n := j+1, 1; k < len(lines) && indentOf(lines[k]) > indent && !testLine.MatchString(lines[k]); k, n = k+1, n+1 {
			j = k
			kind[k] = message
			if n >= maxMessageLines {
				kind[k] = messageCut
			}
		}
	}
	return kind
}

// indentOf is the number of leading spaces of l.
func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// testLine is a line a test logged through testing.T: "    x_test.go:12: ...".
var testLine = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)
