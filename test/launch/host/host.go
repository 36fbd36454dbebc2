// Package host finds and removes the state a launched cluster leaves on
// the host outside its own processes' reach, and checks that a teardown
// left none.
//
// A kubelet and containerd touch more of the host than their own
// directories: containerd shims outlive containerd, containers live in
// kubepods cgroups, pods get network namespaces under /run/netns, the bridge
// plugin creates a bridge, kubelet insists on /var/lib/kubelet/device-plugins.
// The launcher records what existed before it started (TakeBaseline) and
// Sweep removes exactly what appeared since; FindLeftovers reports what
// remains, and a Snapshot taken before and after compares the host
// independently of that bookkeeping, so tests can assert a clean teardown.
//
// Everything is read from the host afresh (/proc, sysfs, the mount table);
// the package keeps no state of its own.
package host

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo"
	"source.plinth.dev/pkg/procfs"
)

// BridgeName is the CNI bridge; a name of our own so we never delete
// another tool's cni0.
const BridgeName = "plinth0"

// Baseline is the host state before a cluster started.
type Baseline struct {
	NetNS        []string `json:"netns"`
	Kubepods     bool     `json:"kubepods"` // kubepods cgroups existed already
	KubeletDir   bool     `json:"kubeletDir"`
	BridgeExists bool     `json:"bridgeExists"`
	// RunContainerd: /run/containerd existed (containerd keeps shim
	// sockets and runc state there whatever its configured state dir).
	RunContainerd bool `json:"runContainerd"`
}

// TakeBaseline records the host-wide state that exists before a cluster
// starts, which Sweep must leave alone.
func TakeBaseline() Baseline {
	b := Baseline{NetNS: netnsNames()}
	b.Kubepods = len(kubepodsCgroups()) > 0
	_, err := os.Stat("/var/lib/kubelet")
	b.KubeletDir = err == nil
	_, err = os.Stat("/sys/class/net/" + BridgeName)
	b.BridgeExists = err == nil
	_, err = os.Stat("/run/containerd")
	b.RunContainerd = err == nil
	return b
}

// Leftovers lists what a cluster in a work directory left on the host.
type Leftovers struct {
	Processes   []string // "pid: cmdline"
	Mounts      []string
	LoopDevices []string
	NetNS       []string
	Other       []string // bridge, cgroups, directories
}

// Empty reports whether nothing was left behind.
func (l Leftovers) Empty() bool {
	return len(l.Processes)+len(l.Mounts)+len(l.LoopDevices)+len(l.NetNS)+len(l.Other) == 0
}

func (l Leftovers) String() string {
	var b strings.Builder
	for _, s := range []struct {
		what  string
		items []string
	}{{"processes", l.Processes}, {"mounts", l.Mounts}, {"loop devices", l.LoopDevices}, {"netns", l.NetNS}, {"other", l.Other}} {
		if len(s.items) > 0 {
			fmt.Fprintf(&b, "%s: %s; ", s.what, strings.Join(s.items, ", "))
		}
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// FindLeftovers inspects the host for state of the cluster in dir.
func FindLeftovers(dir string, base Baseline) Leftovers {
	var l Leftovers
	for _, pid := range ClusterProcesses(dir, base) {
		l.Processes = append(l.Processes, fmt.Sprintf("%d: %s", pid, cmdline(pid)))
	}
	l.Mounts = MountsUnder(dir)
	l.LoopDevices = ownLoops(dir)
	l.NetNS = newNetNS(base)
	if !base.BridgeExists {
		if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
			l.Other = append(l.Other, "network link "+BridgeName)
		}
	}
	if !base.Kubepods {
		l.Other = append(l.Other, kubepodsCgroups()...)
	}
	for _, d := range createdDirs(base) {
		if _, err := os.Stat(d); err == nil {
			l.Other = append(l.Other, d)
		}
	}
	return l
}

// Sweep removes everything FindLeftovers would report, as forcefully as
// needed. It is the last step of every teardown and the first step after a
// launcher that died without one.
func Sweep(dir string, base Baseline) error {
	var errs []error
	// Processes first: they hold mounts and loop devices.
	for try := 0; try < 50; try++ {
		pids := ClusterProcesses(dir, base)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pids := ClusterProcesses(dir, base); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes survive SIGKILL: %v", pids))
	}
	for _, ns := range newNetNS(base) {
		p := filepath.Join("/run/netns", ns)
		_ = unix.Unmount(p, unix.MNT_DETACH)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing netns %s: %w", ns, err))
		}
	}
	// Deepest mounts first; a lazy unmount is the fallback for a mount some
	// process still has open, so the directory tree can at least go away.
	for _, m := range MountsUnder(dir) {
		if err := unix.Unmount(m, 0); err != nil {
			if err2 := unix.Unmount(m, unix.MNT_DETACH); err2 != nil && !errors.Is(err2, unix.EINVAL) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	// The data filesystem's device has autoclear: it goes away by itself
	// once unmounted, a moment after the unmount returns. Give it that
	// moment; detach what remains (block volumes of plinth-node).
	for try := 0; try < 20 && len(ownLoops(dir)) > 0; try++ {
		time.Sleep(50 * time.Millisecond)
	}
	for _, dev := range ownLoops(dir) {
		d, err := loop.Open(dev)
		if err != nil {
			errs = append(errs, fmt.Errorf("detaching %s: %w", dev, err))
			continue
		}
		if err := d.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("detaching %s: %w", dev, err))
		}
	}
	if !base.BridgeExists {
		if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
			if out, err := exec.Command("ip", "link", "delete", BridgeName).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("deleting bridge %s: %w: %s", BridgeName, err, bytes.TrimSpace(out)))
			}
		}
	}
	if !base.Kubepods {
		for _, cg := range kubepodsCgroups() {
			if err := removeCgroupTree(cg); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range createdDirs(base) {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// createdDirs are the host directories outside the work directory that the
// components create (kubelet's device-plugins directory is hard-coded, and
// containerd's shim sockets live in /run/containerd), when they did not
// exist before.
func createdDirs(base Baseline) []string {
	var out []string
	if !base.KubeletDir {
		out = append(out, "/var/lib/kubelet")
	}
	if !base.RunContainerd {
		out = append(out, "/run/containerd")
	}
	return out
}

// ClusterProcesses returns the processes of the cluster in dir: everything
// whose command line names dir (components, containerd shims), their
// descendants (containers), and when kubepods did not exist before, every
// process in a kubepods cgroup (containers orphaned by a killed shim).
func ClusterProcesses(dir string, base Baseline) []int {
	self := os.Getpid()
	parents := map[int]int{}
	// Never the launcher itself or what started it (go test, make).
	ancestors := map[int]bool{}
	for p := self; p > 1 && !ancestors[p]; p = ppid(p) {
		ancestors[p] = true
	}
	var roots []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		parents[pid] = ppid(pid)
		if strings.Contains(cmdline(pid), dir+"/") || (!base.Kubepods && inKubepods(pid)) {
			roots = append(roots, pid)
		}
	}
	found := map[int]bool{}
	for _, r := range roots {
		found[r] = true
	}
	// Descendants: repeat until no new process joins (the tree is shallow).
	for changed := true; changed; {
		changed = false
		for pid, parent := range parents {
			if !found[pid] && found[parent] {
				found[pid], changed = true, true
			}
		}
	}
	out := make([]int, 0, len(found))
	for pid := range found {
		if !ancestors[pid] {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

func cmdline(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(data, []byte{0}, []byte{' '})))
}

func ppid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, fields, err := procfs.ParseStat(string(data))
	if err != nil || len(fields) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(fields[1])
	return n
}

func inKubepods(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(data, []byte(":/kubepods"))
}

// MountsUnder lists mount points at or below dir, deepest first.
func MountsUnder(dir string) []string {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, m.MountPoint)
		}
	}
	// Later mounts stack on earlier ones, and deeper paths sort after their
	// parents: unmount in reverse order of both.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// ownLoops lists the loop devices backed below dir that are ours to
// detach: not those still mounted in another process's mount namespace.
// On a shared machine a sandbox (bazel's linux-sandbox, unshare) may clone
// the mount table while the cluster runs; its copy of the data mount keeps
// the device busy until that namespace ends, and autoclear then frees it.
// Nothing we can (or should) do about other namespaces, so such devices
// are reported by PinnedLoops instead of counting as our leftovers.
func ownLoops(dir string) []string {
	pinned := PinnedLoops(dir)
	var out []string
	for _, dev := range LoopsUnder(dir) {
		if _, ok := pinned[dev]; !ok {
			out = append(out, dev)
		}
	}
	return out
}

// PinnedLoops maps loop devices backed below dir that are mounted in a
// mount namespace other than ours to a process of that namespace.
func PinnedLoops(dir string) map[string]string {
	devs := map[string]string{} // "7:N" -> /dev/loopN
	for _, dev := range LoopsUnder(dir) {
		if data, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/dev"); err == nil {
			devs[strings.TrimSpace(string(data))] = dev
		}
	}
	out := map[string]string{}
	if len(devs) == 0 {
		return out
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	seen := map[string]bool{self: true}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		mounts, err := mountinfo.ReadPID(pid)
		if err != nil {
			continue
		}
		for _, m := range mounts {
			if dev, ok := devs[fmt.Sprintf("%d:%d", m.Major, m.Minor)]; ok {
				out[dev] = fmt.Sprintf("pid %d (%s)", pid, filepath.Base(strings.Fields(cmdline(pid) + " ?")[0]))
			}
		}
	}
	return out
}

// LoopsUnder lists loop devices whose backing file is below dir.
func LoopsUnder(dir string) []string {
	bindings, _ := loop.Bindings()
	var out []string
	for _, b := range bindings {
		if strings.HasPrefix(b.Backing, dir+"/") {
			out = append(out, b.Path())
		}
	}
	sort.Strings(out)
	return out
}

func netnsNames() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// newNetNS lists the CNI network namespaces that appeared since base.
func newNetNS(base Baseline) []string {
	old := map[string]bool{}
	for _, n := range base.NetNS {
		old[n] = true
	}
	var out []string
	for _, n := range netnsNames() {
		if !old[n] && strings.HasPrefix(n, "cni-") {
			out = append(out, n)
		}
	}
	return out
}

// kubepodsCgroups lists the kubepods cgroup directories (cgroupfs driver;
// one per v1 controller, or the single v2 one).
func kubepodsCgroups() []string {
	var out []string
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		out = append(out, "/sys/fs/cgroup/kubepods")
	}
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	return append(out, matches...)
}

// removeCgroupTree removes an (empty of processes) cgroup directory tree,
// children first; cgroup directories are removed with rmdir, not unlink.
func removeCgroupTree(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.SliceStable(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
