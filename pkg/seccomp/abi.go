package seccomp

import "golang.org/x/sys/unix"

// archABIs are, for each architecture Plinth ships for (GOARCH), the
// system call conventions its kernel accepts. They are spelled out in
// numbers rather than through unix.SYS_IOCTL, which is the building
// architecture's, so that every architecture's filter is built, and can
// be run by a test, on any of them.
var archABIs = map[string][]syscallABI{
	// x86-64: the native convention, x32 (ioctl has its own number
	// there, with the x32 bit; the native number with the bit set is
	// refused by the kernel) and i386, which a 64-bit kernel runs for
	// 32-bit programs.
	"amd64": {
		{arch: unix.AUDIT_ARCH_X86_64, ioctl: []uint32{16, x32Bit | 514}},
		{arch: unix.AUDIT_ARCH_I386, ioctl: []uint32{54}},
	},
	// arm64: the native convention and 32-bit ARM (EABI), which a 64-bit
	// kernel may run.
	"arm64": {
		{arch: unix.AUDIT_ARCH_AARCH64, ioctl: []uint32{29}},
		{arch: unix.AUDIT_ARCH_ARM, ioctl: []uint32{54}},
	},
}

// x32Bit marks an x32 system call's number (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// lowWord is where the low 32 bits of a 64-bit argument are in
// seccomp_data: every architecture of archABIs is little-endian.
const lowWord = 0
