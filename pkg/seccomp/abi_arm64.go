package seccomp

import "golang.org/x/sys/unix"

// abis on arm64: the native convention and 32-bit ARM (EABI), which a
// 64-bit kernel may run.
var abis = []syscallABI{
	{arch: unix.AUDIT_ARCH_AARCH64, ioctl: []uint32{unix.SYS_IOCTL}},
	{arch: unix.AUDIT_ARCH_ARM, ioctl: []uint32{54}},
}

// lowWord is where the low 32 bits of a 64-bit argument are in
// seccomp_data: little-endian.
const lowWord = 0
