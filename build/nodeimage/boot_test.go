package nodeimage

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"source.plinth.dev/build/microvm"
	"source.plinth.dev/node/core/imagelayout"

	"source.plinth.dev/build/initramfs"
)

// The boot test boots a variant of the node image, the real one with
// build/nodeimage/bootcheck as /init instead of plinth-node, on the test
// kernel under qemu (TCG), and reads what bootcheck prints: every
// dynamically linked program of the image must start there, which only
// happens when the loader and every library it needs are in the image at
// the paths it looks at. A negative control boots the same image without
// one library and must see the program that needs it fail.

type bootInputs struct {
	in     Inputs
	kernel string
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module source.plinth.dev\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot find the repository root from the working directory")
		}
		dir = parent
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// prepareBoot gathers the node image's real inputs, with bootcheck as init.
func prepareBoot(t *testing.T) bootInputs {
	t.Helper()
	if os.Getenv("TEST_SRCDIR") != "" {
		// Bazel's sandbox has neither the scripts, the kubelet nor a Go
		// toolchain; the boot test runs under go test (make test-unit).
		t.Skip("the image boot test runs under go test, not Bazel")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the image boot test installs packages and needs root; CI=true forbids skipping it")
		}
		t.Skip("needs root (installs packages)")
	}
	root := repoRoot(t)
	run(t, root, nil, "build/scripts/apt-install.sh", append([]string{"qemu-system-x86", "lz4"}, DebianPackages...)...)
	kernel := run(t, root, nil, "test/ktest/kernel.sh")
	mods, _ := filepath.Glob(filepath.Join(kernel, "lib/modules/*"))
	if len(mods) != 1 {
		t.Fatalf("expected one module directory in %s, found %q", kernel, mods)
	}
	kubelet := filepath.Join(run(t, root, nil, "third_party/kubernetes/build.sh"), "kubelet")
	work := t.TempDir()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	check := filepath.Join(work, "bootcheck")
	run(t, root, []string{"CGO_ENABLED=0"}, gobin, "build", "-o", check, "./build/nodeimage/bootcheck")
	imgs, err := NodeImages(context.Background(), root, work)
	if err != nil {
		t.Fatal(err)
	}
	return bootInputs{
		kernel: filepath.Join(kernel, "vmlinux"),
		in:     NodeInputs(check, kubelet, mods[0], imgs),
	}
}

// bootResult is what the VM's console showed.
type bootResult struct {
	console string
	ok      map[string]string // program -> first output line
	failed  map[string]string // program -> error
	summary []string          // the result line's numbers: failed, total
	initAt  float64           // seconds from boot to init
	wall    time.Duration
}

var (
	okLine     = regexp.MustCompile(`^bootcheck: ok (\S+): (.*)$`)
	failLine   = regexp.MustCompile(`^bootcheck: FAIL (\S+?):? (.*)$`)
	resultLine = regexp.MustCompile(`^bootcheck: result (\d+) failed of (\d+)`)
	initLine   = regexp.MustCompile(`^bootcheck: init started ([0-9.]+)s after boot`)
)

// boot boots the image and waits for bootcheck to power the VM off.
func boot(t *testing.T, kernel, image string) bootResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var console bytes.Buffer // written by microvm's reader until qemu ends
	start := time.Now()
	vm, err := microvm.Start(ctx, microvm.Config{
		Kernel: kernel, Initrd: image, KernelArgs: []string{"loglevel=3"},
		// 1 GiB: the archive (compressed) and the unpacked root must fit
		// at once while the kernel unpacks.
		Memory: "1G", CPUs: 2,
		Console: &console,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = vm.Err() // bootcheck powers the VM off; ctx's end kills it
	out := console.Bytes()
	r := bootResult{console: string(out), wall: time.Since(start), ok: map[string]string{}, failed: map[string]string{}, initAt: -1}
	if ctx.Err() != nil {
		t.Fatalf("the VM did not power off within 5 minutes:\n%s", out)
	}
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if m := okLine.FindStringSubmatch(l); m != nil {
			r.ok[m[1]] = m[2]
		} else if m := resultLine.FindStringSubmatch(l); m != nil {
			r.summary = m[1:]
		} else if m := initLine.FindStringSubmatch(l); m != nil {
			r.initAt, _ = strconv.ParseFloat(m[1], 64)
		} else if m := failLine.FindStringSubmatch(l); m != nil {
			r.failed[m[1]] = m[2]
		}
	}
	if r.summary == nil {
		t.Fatalf("no result line on the console (init did not run, or died):\n%s", out)
	}
	return r
}

// programPaths are the image's programs bootcheck must have run: the
// programs, the kubelet and busybox's links.
func programPaths(in Inputs) []string {
	var ps []string
	for _, p := range in.Programs {
		ps = append(ps, p.Path)
	}
	ps = append(ps, imagelayout.Kubelet)
	return append(ps, BusyboxLinks...)
}

func TestBootedImageRunsItsPrograms(t *testing.T) {
	b := prepareBoot(t)
	start := time.Now()
	img, err := Build(context.Background(), b.in, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %.1fs: %d bytes (%d uncompressed)", img.Path, time.Since(start).Seconds(), img.Size, img.RawSize)
	r := boot(t, b.kernel, img.Path)
	if r.summary[0] != "0" || len(r.failed) != 0 {
		t.Errorf("bootcheck: %s of %s checks failed: %v\n%s", r.summary[0], r.summary[1], r.failed, r.console)
	}
	for _, p := range programPaths(b.in) {
		if _, ok := r.ok[p]; !ok {
			t.Errorf("%s did not run in the booted image (failed: %q)", p, r.failed[p])
		}
	}
	if !strings.Contains(r.ok["modules"], "loaded") {
		t.Errorf("modules were not loaded: %q", r.failed["modules"])
	}
	t.Logf("init started %.1fs after boot; the VM ran %.1fs", r.initAt, r.wall.Seconds())
	for p, l := range r.ok {
		t.Logf("ok %s: %s", p, l)
	}
}

// TestBootWithoutALibraryFails is the negative control: the same image
// without runc's libseccomp must make runc, and only runc, fail in the VM.
func TestBootWithoutALibraryFails(t *testing.T) {
	b := prepareBoot(t)
	b.in.Compression = "none"
	img, err := Build(context.Background(), b.in, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(img.Path)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := initramfs.Read(raw)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.cpio")
	f, err := os.Create(broken)
	if err != nil {
		t.Fatal(err)
	}
	w := initramfs.NewWriter(f)
	dropped := 0
	for _, e := range entries {
		switch {
		case strings.HasPrefix(path.Base(e.Name), "libseccomp.so"):
			dropped++
		case e.Mode&initramfs.TypeMask == initramfs.TypeDir:
			w.Dir(e.Name)
		case e.Mode&initramfs.TypeMask == initramfs.TypeLink:
			w.Symlink(e.Name, string(e.Data))
		case e.Mode&initramfs.TypeMask == initramfs.TypeChar:
			w.CharDev(e.Name, 5, 1)
		default:
			w.File(e.Name, os.FileMode(e.Mode&0o777), e.Data)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if dropped == 0 {
		t.Fatal("no libseccomp in the image to drop; pick another library runc needs")
	}
	r := boot(t, b.kernel, broken)
	if r.summary[0] != "1" {
		t.Errorf("without libseccomp, %s checks failed, want exactly 1 (runc):\n%s", r.summary[0], r.console)
	}
	why, ok := r.failed["/usr/sbin/runc"]
	if !ok || !strings.Contains(why, "libseccomp.so.2") {
		t.Errorf("runc did not fail for want of libseccomp.so.2: %q\n%s", why, r.console)
	}
	t.Logf("without libseccomp: runc: %s", why)
}
