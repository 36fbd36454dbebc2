package host

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"source.plinth.dev/pkg/mountinfo"
)

// Snapshot records host state a cluster could leak, independently of
// the sweep's own bookkeeping, so the teardown check does not merely
// repeat the teardown's logic. Other work on a shared machine (builds,
// other tests) also mounts things and starts processes, so only state a
// cluster can produce is compared: mounts below the work directory or in
// kubelet/containerd/netns locations, loop devices backed below the work
// directory, processes of the cluster's programs that name the work
// directory or run in a pod cgroup, pod network links.
type Snapshot struct {
	mounts map[string]bool
	loops  map[string]bool
	procs  map[int]string
	links  map[string]bool
}

// clusterPrograms are the executables (by base name) a cluster runs.
var clusterPrograms = map[string]bool{
	"etcd": true, "kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true,
	"kubelet": true, "containerd": true, "containerd-shim": true, "containerd-shim-runc-v2": true,
	"runc": true, "pause": true, "busybox": true, "plinth-node": true, "snapshot-controller": true,
	"containerd-shim-runsc-v1": true, "runsc": true,
}

// TakeSnapshot records the host state that the cluster in dir could leak.
func TakeSnapshot(dir string) Snapshot {
	s := Snapshot{mounts: map[string]bool{}, loops: map[string]bool{}, procs: map[int]string{}, links: map[string]bool{}}
	if mounts, err := mountinfo.Read(); err == nil {
		for _, m := range mounts {
			for _, p := range []string{dir + "/", "/run/netns/", "/run/containerd/", "/var/lib/kubelet/"} {
				if strings.HasPrefix(m.MountPoint+"/", p) {
					s.mounts[m.MountPoint] = true
				}
			}
		}
	}
	for _, dev := range ownLoops(dir) { // see ownLoops for what is not counted
		s.loops[dev] = true
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		name := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		// Only this cluster's: other tests may run their own etcd and
		// apiserver (launch.StartControlPlane) at the same time.
		if clusterPrograms[name] && (strings.Contains(cmdline(pid), dir+"/") || inKubepods(pid)) {
			s.procs[pid] = name
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if n := l.Name(); n == BridgeName || strings.HasPrefix(n, "veth") {
			s.links[n] = true
		}
	}
	return s
}

// Diff describes what after has that s (before) did not; "" if nothing.
func (s Snapshot) Diff(after Snapshot) string {
	var out []string
	for m := range after.mounts {
		if !s.mounts[m] {
			out = append(out, "mount "+m)
		}
	}
	for l := range after.loops {
		if !s.loops[l] {
			out = append(out, "loop device "+l)
		}
	}
	for pid, name := range after.procs {
		if _, ok := s.procs[pid]; !ok {
			out = append(out, fmt.Sprintf("process %d (%s)", pid, name))
		}
	}
	for l := range after.links {
		if !s.links[l] {
			out = append(out, "network link "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
