package volumetest

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CreateFileAs creates the file name in dir as a process with user uid,
// group gid and supplementary groups would (a pod's user, with its
// fsGroup among its groups, say), and reports the kernel's verdict: nil,
// or the error (EACCES when the directory's mode does not let that user
// write). Only dir's own mode and ownership decide: dir is opened as the
// caller (root) first, as a pod's bind mount makes the volume reachable
// without its parents. The file is removed again.
//
// The credentials are changed for one OS thread only, by raw system calls
// (Go's own setuid changes every thread of the process), on a goroutine
// that keeps the thread locked to it and ends, so the runtime discards the
// thread instead of reusing it. No helper binary is needed, so this works
// in the kernel-test VM too.
func CreateFileAs(dir, name string, uid, gid uint32, groups ...uint32) error {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		done <- createAs(dfd, name, uid, gid, groups)
	}()
	if err := <-done; err != nil {
		return err
	}
	if err := unix.Unlinkat(dfd, name, 0); err != nil {
		return fmt.Errorf("removing %s from %s: %w", name, dir, err)
	}
	return nil
}

func createAs(dfd int, name string, uid, gid uint32, groups []uint32) error {
	var list unsafe.Pointer
	if len(groups) > 0 {
		list = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(list), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	// Giving up uid 0 on every ID clears the thread's capabilities, so
	// CAP_DAC_OVERRIDE no longer bypasses the directory's mode.
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("creating %s as %d:%d %v: %w", name, uid, gid, groups, err)
	}
	return unix.Close(fd)
}
