// Command bootcheck is the /init of the boot test's variant of the node
// image: the node image with this program in place of plinth-node. It
// shows that the image's dynamically linked programs really start in the
// booted image (their loader, every library and the kernel's view of
// them), which no check on the host can: it runs each with a version flag,
// prints the first line each wrote, loads the image's module list, and
// powers the machine off.
//
// Console lines (the test parses them):
//
//	bootcheck: ok <program>: <first line of output>
//	bootcheck: FAIL <program>: <error>: <output>
//	bootcheck: init started <seconds>s after boot
//	bootcheck: result <failures> failed of <checks> after <seconds>s since boot
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/imagelayout"
	"source.plinth.dev/pkg/kmod"
)

// check is one program to run and a word its output must contain.
type check struct {
	args []string
	env  []string
	want string
}

func checks() []check {
	cni := []string{"CNI_COMMAND=VERSION"}
	return []check{
		{args: []string{"/usr/bin/containerd", "--version"}, want: "containerd"},
		{args: []string{"/usr/bin/containerd-shim-runc-v2", "-v"}, want: "Version"},
		{args: []string{"/usr/bin/ctr", "--version"}, want: "ctr"},
		// runc also prints the libseccomp it loaded.
		{args: []string{"/usr/sbin/runc", "--version"}, want: "libseccomp"},
		{args: []string{imagelayout.Kubelet, "--version"}, want: "Kubernetes"},
		{args: []string{"/sbin/mkfs.xfs", "-V"}, want: "mkfs.xfs version"},
		{args: []string{imagelayout.CNIBinDir + "/bridge"}, env: cni, want: "cniVersion"},
		{args: []string{imagelayout.CNIBinDir + "/host-local"}, env: cni, want: "cniVersion"},
		{args: []string{imagelayout.CNIBinDir + "/loopback"}, env: cni, want: "cniVersion"},
		{args: []string{"/bin/sh", "-c", "echo sh runs"}, want: "sh runs"},
		// busybox mount without arguments lists the mounts (proc is one).
		{args: []string{"/bin/mount"}, want: "proc"},
	}
}

func main() {
	log := func(format string, a ...any) { fmt.Printf("bootcheck: "+format+"\n", a...) }
	failed, total := 0, 0
	fail := func(format string, a ...any) {
		failed++
		log("FAIL "+format, a...)
	}
	// The programs need /dev/null (exec wires unused stdin to it) and
	// mount reads /proc; plinth-node's init mounts the same.
	for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		total++
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			fail("mounting %s: %v", m.dst, err)
		}
	}
	// The time from boot to here is mostly unpacking the image.
	started := uptime()
	total++
	if mods, err := loadModules(imagelayout.ModuleList); err != nil {
		fail("modules: %v", err)
	} else {
		log("ok modules: loaded %d from %s", mods, imagelayout.ModuleList)
	}
	log("init started %.1fs after boot", started)
	for _, c := range checks() {
		total++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, c.args[0], c.args[1:]...)
		cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, c.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		switch {
		case err != nil:
			fail("%s: %v: %s", c.args[0], err, bytes.TrimSpace(out))
		case !strings.Contains(string(out), c.want):
			fail("%s: output lacks %q: %s", c.args[0], c.want, bytes.TrimSpace(out))
		default:
			log("ok %s: %s", c.args[0], first)
		}
	}
	log("result %d failed of %d after %.1fs since boot", failed, total, uptime())
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		log("FAIL powering off: %v", err)
	}
	select {} // PID 1 must not exit
}

// loadModules loads every module of the list, in order, as plinth-node's
// init does.
func loadModules(list string) (int, error) {
	mods, err := kmod.ReadList(list)
	if err != nil {
		return 0, err
	}
	if len(mods) == 0 {
		return 0, fmt.Errorf("no modules listed in %s", list)
	}
	for _, m := range mods {
		if err := kmod.Load(m); err != nil {
			return 0, err
		}
	}
	return len(mods), nil
}

// uptime is the time since boot, from /proc/uptime.
func uptime() float64 {
	var up float64
	b, err := os.ReadFile("/proc/uptime")
	if err == nil {
		_, err = fmt.Sscan(string(b), &up)
	}
	if err != nil {
		return -1
	}
	return up
}
