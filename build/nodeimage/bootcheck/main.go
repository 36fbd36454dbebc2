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
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/build/nodeimage"
	"source.plinth.dev/node/core/imagelayout"
	"source.plinth.dev/pkg/kmod"
)

// probe is how to run a program so that it proves it starts, without
// doing anything: the arguments after its path, its environment, and a
// word its output must contain.
type probe struct {
	args []string
	env  []string
	want string
}

// check is a program of the image and its probe.
type check struct {
	path string
	probe
}

// probes are the probes of the image's programs, by base name.
var probes = map[string]probe{
	"containerd":              {args: []string{"--version"}, want: "containerd"},
	"containerd-shim-runc-v2": {args: []string{"-v"}, want: "Version"},
	"ctr":                     {args: []string{"--version"}, want: "ctr"},
	// runc also prints the libseccomp it loaded.
	"runc":       {args: []string{"--version"}, want: "libseccomp"},
	"kubelet":    {args: []string{"--version"}, want: "Kubernetes"},
	"mkfs.xfs":   {args: []string{"-V"}, want: "mkfs.xfs version"},
	"bridge":     {env: []string{"CNI_COMMAND=VERSION"}, want: "cniVersion"},
	"host-local": {env: []string{"CNI_COMMAND=VERSION"}, want: "cniVersion"},
	"loopback":   {env: []string{"CNI_COMMAND=VERSION"}, want: "cniVersion"},
	"busybox":    {args: []string{"--help"}, want: "BusyBox"},
	"sh":         {args: []string{"-c", "echo sh runs"}, want: "sh runs"},
	// busybox mount without arguments lists the mounts (proc is one).
	"mount": {want: "proc"},
	// An applet's --help names busybox and succeeds.
	"umount": {args: []string{"--help"}, want: "BusyBox"},
}

// checks are the node image's programs (nodeimage.DebianPrograms, the
// kubelet and busybox's links), each with its probe: the list the image
// is built from is the list checked, and a program without a probe is a
// failed check, not a skipped one.
func checks() (cs []check, unprobed []string) {
	paths := []string{imagelayout.Kubelet}
	for _, p := range nodeimage.DebianPrograms() {
		paths = append(paths, p.Path)
	}
	for _, p := range append(paths, nodeimage.BusyboxLinks...) {
		pr, ok := probes[path.Base(p)]
		if !ok {
			unprobed = append(unprobed, p)
			continue
		}
		cs = append(cs, check{path: p, probe: pr})
	}
	return cs, unprobed
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
	cs, unprobed := checks()
	for _, p := range unprobed {
		total++
		fail("%s: no probe in bootcheck says how to run it", p)
	}
	for _, c := range cs {
		total++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, c.path, c.args...)
		cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, c.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		switch {
		case err != nil:
			fail("%s: %v: %s", c.path, err, bytes.TrimSpace(out))
		case !strings.Contains(string(out), c.want):
			fail("%s: output lacks %q: %s", c.path, c.want, bytes.TrimSpace(out))
		default:
			log("ok %s: %s", c.path, first)
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
