package seccomp_test

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/seccomp"
)

// convention is one system call convention as the kernel's tables give
// it, written here independently of the package's own table.
type convention struct {
	name  string
	arch  uint32
	ioctl uint32
}

// conventions are, by GOARCH, the conventions whose ioctl the filter must
// catch: arch/x86/entry/syscalls/syscall_64.tbl (16; x32's own 514 with
// __X32_SYSCALL_BIT), syscall_32.tbl (54), include/uapi/asm-generic/
// unistd.h for arm64 (29) and arch/arm/tools/syscall.tbl (54).
var conventions = map[string][]convention{
	"amd64": {
		{"x86-64", unix.AUDIT_ARCH_X86_64, 16},
		{"x32", unix.AUDIT_ARCH_X86_64, 0x40000000 | 514},
		{"i386", unix.AUDIT_ARCH_I386, 54},
	},
	"arm64": {
		{"aarch64", unix.AUDIT_ARCH_AARCH64, 29},
		{"arm", unix.AUDIT_ARCH_ARM, 54},
	},
}

// everyDenied is what the runc wrapper denies (runcguard.Denied):
// FS_IOC_FSSETXATTR and every loop ioctl that changes a device.
var everyDenied = []uint32{
	fsIocFssetxattr,
	unix.LOOP_SET_FD, unix.LOOP_CLR_FD, unix.LOOP_SET_STATUS, unix.LOOP_SET_STATUS64,
	0x4c06, // LOOP_CHANGE_FD
	unix.LOOP_SET_CAPACITY, unix.LOOP_SET_DIRECT_IO, unix.LOOP_SET_BLOCK_SIZE, unix.LOOP_CONFIGURE,
	unix.LOOP_CTL_ADD, unix.LOOP_CTL_REMOVE, unix.LOOP_CTL_GET_FREE,
}

// allowedCmds are ioctls the filter must let through.
var allowedCmds = []uint32{fsIocFsgetxattr, unix.LOOP_GET_STATUS, unix.LOOP_GET_STATUS64, unix.TCGETS, unix.BLKGETSIZE64, 0}

const (
	allow = unix.SECCOMP_RET_ALLOW
	deny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
)

// call is one system call as the filter sees it (struct seccomp_data).
type call struct {
	arch uint32
	nr   uint32
	args [6]uint64
}

// data is c's struct seccomp_data, as the filter's loads read it. The
// kernel loads each 32-bit word in the machine's order, the interpreter
// of x/net/bpf in network order: each word is written in network order,
// at the offset where a little-endian machine keeps it (a 64-bit
// argument's low word first).
func (c call) data() []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], c.nr)
	binary.BigEndian.PutUint32(b[4:], c.arch)
	for i, a := range c.args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[16+8*i+4:], uint32(a>>32))
	}
	return b
}

// run runs filter, classic BPF as the kernel's seccomp runs it, on c.
func run(t *testing.T, vm *bpf.VM, c call) uint32 {
	t.Helper()
	r, err := vm.Run(c.data())
	if err != nil {
		t.Fatalf("running the filter on %+v: %v", c, err)
	}
	return uint32(r)
}

// vmOf loads filter into x/net/bpf's interpreter, refusing any
// instruction it would not decode into one it runs.
func vmOf(t *testing.T, filter []unix.SockFilter) *bpf.VM {
	t.Helper()
	prog := make([]bpf.Instruction, len(filter))
	for i, f := range filter {
		prog[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
		if _, raw := prog[i].(bpf.RawInstruction); raw {
			t.Fatalf("instruction %d (%+v) is one the interpreter does not know", i, f)
		}
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestEveryArchitecturesFilter runs the filter built for each
// architecture (not only the one testing) in a classic BPF interpreter,
// on made-up seccomp_data: in each of the architecture's conventions
// the denied commands get EPERM, with the command's high 32 bits set as
// well; other commands, the denied ones in another argument or only in
// the high bits, and other system calls are allowed; so is every call of
// a convention the architecture's kernel does not run. This is a test of
// the program's logic, not a kernel run: TestDeniesOnlyItsIoctls runs
// the host's filter in the kernel.
func TestEveryArchitecturesFilter(t *testing.T) {
	arches := seccomp.Arches()
	slices.Sort(arches)
	if want := []string{"amd64", "arm64"}; !slices.Equal(arches, want) {
		t.Fatalf("the package filters for %v, this test knows %v", arches, want)
	}
	for _, arch := range arches {
		t.Run(arch, func(t *testing.T) {
			filter, err := seccomp.DenyIoctlsFor(arch, everyDenied)
			if err != nil {
				t.Fatal(err)
			}
			vm := vmOf(t, filter)
			foreign := []uint32{unix.AUDIT_ARCH_PPC64LE, unix.AUDIT_ARCH_RISCV64, unix.AUDIT_ARCH_S390X}
			for other, cs := range conventions {
				for _, c := range cs {
					if other != arch {
						foreign = append(foreign, c.arch)
					}
				}
			}
			expect := func(what string, c call, want uint32) {
				t.Helper()
				if got := run(t, vm, c); got != want {
					t.Errorf("%s: %#x, want %#x", what, got, want)
				}
			}
			for _, cv := range conventions[arch] {
				for _, cmd := range everyDenied {
					expect(fmt.Sprintf("%s ioctl %#x", cv.name, cmd), call{cv.arch, cv.ioctl, [6]uint64{3, uint64(cmd)}}, deny)
					expect(fmt.Sprintf("%s ioctl %#x, high bits set", cv.name, cmd), call{cv.arch, cv.ioctl, [6]uint64{3, 0xffffffff_00000000 | uint64(cmd)}}, deny)
					expect(fmt.Sprintf("%s ioctl %#x in the high bits only", cv.name, cmd), call{cv.arch, cv.ioctl, [6]uint64{3, uint64(cmd) << 32}}, allow)
					expect(fmt.Sprintf("%s ioctl with %#x as the descriptor", cv.name, cmd), call{cv.arch, cv.ioctl, [6]uint64{uint64(cmd), 0, uint64(cmd)}}, allow)
					for _, nr := range []uint32{0, cv.ioctl - 1, cv.ioctl + 1} {
						expect(fmt.Sprintf("%s call %d with %#x", cv.name, nr, cmd), call{cv.arch, nr, [6]uint64{3, uint64(cmd)}}, allow)
					}
				}
				for _, cmd := range allowedCmds {
					expect(fmt.Sprintf("%s ioctl %#x", cv.name, cmd), call{cv.arch, cv.ioctl, [6]uint64{3, uint64(cmd)}}, allow)
				}
			}
			// A convention this kernel does not run: the kernel refuses
			// the call itself, whatever its number.
			for _, a := range foreign {
				for _, cv := range conventions[arch] {
					expect(fmt.Sprintf("arch %#x, call %d, LOOP_CLR_FD", a, cv.ioctl), call{a, cv.ioctl, [6]uint64{3, unix.LOOP_CLR_FD}}, allow)
				}
			}
		})
	}
}

// TestFilterIsTheHostArchitectures: DenyIoctls builds the filter of the
// architecture it runs on, whose native ioctl is the one this test's
// table names, and refuses an architecture it has no filter for.
func TestFilterIsTheHostArchitectures(t *testing.T) {
	host, err := seccomp.DenyIoctls(everyDenied)
	if err != nil {
		t.Fatal(err)
	}
	same, err := seccomp.DenyIoctlsFor(runtime.GOARCH, everyDenied)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(host, same) {
		t.Errorf("DenyIoctls is not the filter for %s", runtime.GOARCH)
	}
	if cs := conventions[runtime.GOARCH]; len(cs) == 0 || cs[0].ioctl != unix.SYS_IOCTL {
		t.Errorf("on %s this test's native ioctl is %v, the system's %d", runtime.GOARCH, cs, unix.SYS_IOCTL)
	}
	if _, err := seccomp.DenyIoctlsFor("riscv64", everyDenied); err == nil {
		t.Error("a filter for riscv64, which the package has no table for")
	}
}
