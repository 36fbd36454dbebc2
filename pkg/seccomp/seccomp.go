// Package seccomp builds and installs seccomp filters that deny chosen
// ioctl commands, whatever else a process may do.
//
// Why its own filter rather than an OCI profile: runc installs one filter
// from the container's profile through libseccomp, and libseccomp drops a
// rule with arguments for a system call that an earlier rule already
// matches without arguments (db_rule_add, "syscall exists without any
// chains"). containerd's RuntimeDefault profile allows ioctl without
// arguments, so a rule added there denying one ioctl command would be
// silently lost. A second filter needs no such merge: the kernel runs
// every filter of a thread and the most restrictive answer wins (an
// errno over allow), so DenyIoctls narrows any profile, and no profile
// at all, by exactly its commands.
//
// The filter compares only the low 32 bits of the command: the kernel
// takes ioctl's command as an unsigned int, so a caller setting the high
// bits of the register would slip past a 64-bit comparison and still
// reach the command.
//
// Filters are inherited across fork and execve and never removed, so a
// program that installs one and then executes another passes it on to
// everything that program starts.
package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// syscallABI is one system call convention the kernel of this
// architecture accepts: its audit architecture and the numbers of ioctl
// in it.
type syscallABI struct {
	arch  uint32
	ioctl []uint32
}

// DenyIoctls returns a filter that makes ioctl fail with EPERM for each
// of cmds, in every system call convention of this architecture, and
// allows every other call. Calls of an unknown convention are allowed:
// the kernel runs none.
func DenyIoctls(cmds []uint32) ([]unix.SockFilter, error) {
	return denyIoctls(runtime.GOARCH, cmds)
}

// denyIoctls is DenyIoctls for the architecture goarch.
func denyIoctls(goarch string, cmds []uint32) ([]unix.SockFilter, error) {
	abis := archABIs[goarch]
	if len(abis) == 0 {
		return nil, fmt.Errorf("seccomp: no ioctl filter for %s", goarch)
	}
	if len(cmds) == 0 {
		return nil, errors.New("seccomp: no ioctl command to deny")
	}
	var a asm
	for i, abi := range abis {
		next := fmt.Sprint("abi", i+1)
		a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
		a.jeq(abi.arch, "", next)
		a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
		for _, nr := range abi.ioctl {
			a.jeq(nr, "cmd", "")
		}
		a.ret(unix.SECCOMP_RET_ALLOW)
		a.label(next)
	}
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("cmd")
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArgs+8*1+lowWord)
	for _, c := range cmds {
		a.jeq(c, "deny", "")
	}
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("deny")
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	return a.assemble()
}

// Install adds filter to every thread of the calling process. It does not
// set no_new_privs (which would also stop set-user-ID programs in
// whatever the process executes), so the caller needs CAP_SYS_ADMIN.
func Install(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return errors.New("seccomp: empty filter")
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: installing a filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC, the thread that could not take the filter.
		return fmt.Errorf("seccomp: installing a filter: thread %d could not take it", r)
	}
	return nil
}

// asm assembles classic BPF with forward jumps to named labels.
type asm struct {
	prog   []unix.SockFilter
	jumps  []jump
	labels map[string]int
}

// jump is a conditional jump at pc whose targets are labels ("" is the
// next instruction).
type jump struct {
	pc     int
	jt, jf string
}

func (a *asm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *asm) ret(k uint32) { a.stmt(unix.BPF_RET|unix.BPF_K, k) }

func (a *asm) jeq(k uint32, jt, jf string) {
	a.jumps = append(a.jumps, jump{pc: len(a.prog), jt: jt, jf: jf})
	a.stmt(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, k)
}

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

func (a *asm) assemble() ([]unix.SockFilter, error) {
	off := func(pc int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok || to <= pc || to-pc-1 > 255 {
			return 0, fmt.Errorf("seccomp: bad jump from %d to %q", pc, label)
		}
		return uint8(to - pc - 1), nil
	}
	for _, j := range a.jumps {
		var err error
		if a.prog[j.pc].Jt, err = off(j.pc, j.jt); err != nil {
			return nil, err
		}
		if a.prog[j.pc].Jf, err = off(j.pc, j.jf); err != nil {
			return nil, err
		}
	}
	if len(a.prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: filter of %d instructions is too long", len(a.prog))
	}
	return a.prog, nil
}
