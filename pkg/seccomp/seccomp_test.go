package seccomp_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/seccomp"
	"source.plinth.dev/test/ktest"
)

// modeEnv makes the test binary a helper: "install" installs the filter
// and executes itself again as "probe", which makes the calls of probes
// and prints their errors.
const modeEnv = "PLINTH_SECCOMP_TEST_MODE"

const (
	fsIocFsgetxattr = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFssetxattr = 0x401c5820 // _IOW('X', 32, struct fsxattr)
)

// denied are the commands the helper's filter denies.
var denied = []uint32{fsIocFssetxattr, unix.LOOP_CLR_FD}

// probe is one ioctl on a regular file. None of them can succeed with
// EPERM on a file root owns: a file system without the command says
// ENOTTY (or EOPNOTSUPP), one with it succeeds, as the values set are the
// file's own.
type probe struct {
	name string
	cmd  uint64
	// wantDenied: EPERM under the filter.
	wantDenied bool
}

var probes = []probe{
	{"FS_IOC_FSSETXATTR", fsIocFssetxattr, true},
	// The kernel reads the command as 32 bits: the high ones must not
	// get it past the filter.
	{"FS_IOC_FSSETXATTR with high bits", 0xffffffff_00000000 | fsIocFssetxattr, true},
	{"LOOP_CLR_FD", unix.LOOP_CLR_FD, true},
	{"FS_IOC_FSGETXATTR", fsIocFsgetxattr, false},
	{"LOOP_SET_CAPACITY", unix.LOOP_SET_CAPACITY, false},
}

func TestMain(m *testing.M) {
	switch os.Getenv(modeEnv) {
	case "install":
		filter, err := seccomp.DenyIoctls(denied)
		if err == nil {
			err = seccomp.Install(filter)
		}
		if err == nil {
			os.Setenv(modeEnv, "probe")
			err = syscall.Exec("/proc/self/exe", os.Args, os.Environ())
		}
		fmt.Println("error:", err)
		os.Exit(1)
	case "probe":
		fmt.Print(runProbes(os.Args[len(os.Args)-1]))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runProbes makes each probe's call on file and returns a line per probe:
// its name, a tab and the call's error ("ok" for none).
func runProbes(file string) string {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "error: " + err.Error()
	}
	defer f.Close()
	var b strings.Builder
	for _, p := range probes {
		var arg [28]byte // struct fsxattr, which FS_IOC_FSSETXATTR reads
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(fsIocFsgetxattr), uintptr(unsafe.Pointer(&arg))); errno != 0 {
			arg = [28]byte{}
		}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(p.cmd), uintptr(unsafe.Pointer(&arg)))
		res := "ok"
		if errno != 0 {
			res = errno.Error()
		}
		fmt.Fprintf(&b, "%s\t%s\n", p.name, res)
	}
	return b.String()
}

func results(out string) map[string]string {
	m := map[string]string{}
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		if name, res, ok := strings.Cut(s.Text(), "\t"); ok {
			m[name] = res
		}
	}
	return m
}

// TestDeniesOnlyItsIoctls installs a filter denying FS_IOC_FSSETXATTR and
// LOOP_CLR_FD in a helper process, which then executes itself again: in
// the program it executed, those two commands fail with EPERM (also with
// the high bits of the command set), and other ioctls reach the kernel
// as they do without the filter.
func TestDeniesOnlyItsIoctls(t *testing.T) {
	ktest.RequireRoot(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	without := results(runProbes(file))
	for _, p := range probes {
		if without[p.name] == unix.EPERM.Error() || without[p.name] == "" {
			t.Fatalf("without a filter, %s on %s gives %q: the probe cannot tell the filter's answer", p.name, file, without[p.name])
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", file)
	cmd.Env = append(os.Environ(), modeEnv+"=install")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	with := results(string(out))
	for _, p := range probes {
		want := without[p.name]
		if p.wantDenied {
			want = unix.EPERM.Error()
		}
		if with[p.name] != want {
			t.Errorf("%s under the filter: %q, want %q (without it: %q)", p.name, with[p.name], want, without[p.name])
		} else {
			t.Logf("%s: %q under the filter, %q without", p.name, with[p.name], without[p.name])
		}
	}
}

func TestDenyIoctlsRefusesNothingToDeny(t *testing.T) {
	if _, err := seccomp.DenyIoctls(nil); err == nil {
		t.Error("DenyIoctls(nil) gave a filter, want an error")
	}
}
