package seccomp

import "golang.org/x/sys/unix"

// abis on x86-64: the native convention, x32 (ioctl has its own number
// there, with the x32 bit; the native number with the bit set is refused)
// and i386, which a 64-bit kernel runs for 32-bit programs.
var abis = []syscallABI{
	{arch: unix.AUDIT_ARCH_X86_64, ioctl: []uint32{unix.SYS_IOCTL, x32Bit | 514}},
	{arch: unix.AUDIT_ARCH_I386, ioctl: []uint32{54}},
}

// x32Bit marks an x32 system call's number (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// lowWord is where the low 32 bits of a 64-bit argument are in
// seccomp_data: little-endian.
const lowWord = 0
