// Package runcguard is the runc that containerd runs on Plinth's own
// nodes: a wrapper that denies the ioctls by which a container reaches
// past its volume, then executes the real runc with the same arguments.
//
// What it denies (Denied), to every container process that lacks
// CAP_SYS_ADMIN in its bounding set (privileged containers keep
// everything, as they could mount the data partition anyway):
//   - FS_IOC_FSSETXATTR, which a file's owner may use to move the file to
//     another XFS project: into a neighbour's volume, whose writes would
//     then fail for want of space, or out of every project, past its own
//     volume's size (docs/security.md);
//   - the loop ioctls that change a device: a pod given its block
//     claim's /dev/loopN could otherwise detach it or reshape it.
//     LOOP_GET_STATUS and LOOP_GET_STATUS64 only read, and stay allowed.
//
// Why a wrapper: Kubernetes chooses each container's seccomp profile per
// pod (Unconfined unless the pod or the kubelet's --seccomp-default asks
// otherwise), and containerd's RuntimeDefault cannot be extended. The
// wrapper runs for every container whatever its pod asks, as containerd's
// runc runtime names it as its binary (the runtime option BinaryName,
// which the runc shim uses for every runc call). On `runc create`, `run`
// and `restore` it reads the bundle's config.json, on `runc exec` the
// process file, and unless the process may hold CAP_SYS_ADMIN it installs
// its own seccomp filter (package seccomp, which says why not a rule in
// the OCI profile) before it executes runc: the filter passes to runc's
// init and from it to the container's processes, and stays beside
// whatever profile runc installs for the pod. Every other runc command
// passes through untouched.
//
// gVisor's runtime (runsc) never runs this: its sandbox answers the
// container's system calls itself, and answered the project ID ioctls
// with ENOTTY on the VM node without reaching the host (docs/security.md).
package runcguard

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/seccomp"
)

// Name is the wrapper's program name: plinth-node runs as the wrapper
// when it is executed under this name (containerd.Config links it).
const Name = "plinth-runc"

// Commands x/sys/unix does not name.
const (
	fsIocFssetxattr = 0x401c5820 // FS_IOC_FSSETXATTR, _IOW('X', 32, struct fsxattr)
	loopChangeFD    = 0x4c06     // LOOP_CHANGE_FD
)

// Denied are the ioctl commands a container without CAP_SYS_ADMIN gets
// EPERM for.
var Denied = []uint32{
	fsIocFssetxattr,
	unix.LOOP_SET_FD, unix.LOOP_CLR_FD, unix.LOOP_SET_STATUS, unix.LOOP_SET_STATUS64,
	loopChangeFD, unix.LOOP_SET_CAPACITY, unix.LOOP_SET_DIRECT_IO,
	unix.LOOP_SET_BLOCK_SIZE, unix.LOOP_CONFIGURE,
	unix.LOOP_CTL_ADD, unix.LOOP_CTL_REMOVE, unix.LOOP_CTL_GET_FREE,
}

// Main is the wrapper: args are its command line (args[0] its name).
// It returns only on failure, with runc's exit code for an error; its
// message goes to standard error, which the runc shim puts into the
// error it reports (the Event of a pod that cannot start).
func Main(args []string) int {
	err := run(args[1:])
	fmt.Fprintf(os.Stderr, "%s: %v\n", Name, err)
	return 1
}

// run executes runc, with the filter when Guards says so, and returns
// why it could not.
func run(args []string) error {
	guard, err := Guards(args)
	if err != nil {
		return err
	}
	if guard {
		filter, err := seccomp.DenyIoctls(Denied)
		if err != nil {
			return err
		}
		if err := seccomp.Install(filter); err != nil {
			return err
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("finding the real runc: %w", err)
	}
	return fmt.Errorf("executing %s: %w", runc, syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ()))
}

// runc's global options that take a value (runc 1.1, and what
// containerd's go-runc passes); --rootless takes its value after "=".
var globalValued = []string{"root", "log", "log-format", "criu", "rootless"}

// globalBool are runc's global options without a value.
var globalBool = []string{"debug", "systemd-cgroup", "help", "h", "version", "v"}

// Guards reports whether the runc command line args (without the program
// name) starts a container process that gets the filter: `create`, `run`
// or `restore` of a bundle, or `exec` of a process, unless that process
// may hold CAP_SYS_ADMIN. An option before the command that it does not
// know is an error, as it could hide the command.
func Guards(args []string) (bool, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return guardsCommand(a, args[i+1:])
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case slices.Contains(globalValued, name):
			if !hasValue {
				i++
			}
		case slices.Contains(globalBool, name):
		default:
			return false, fmt.Errorf("unknown runc option %q before the command", a)
		}
	}
	return false, nil
}

func guardsCommand(cmd string, args []string) (bool, error) {
	var spec string
	switch cmd {
	case "create", "run", "restore":
		bundle := optionValue(args, "bundle", "b")
		if bundle == "" {
			bundle = "." // runc's default: the working directory
		}
		spec = filepath.Join(bundle, "config.json")
	case "exec":
		spec = optionValue(args, "process", "p")
		if spec == "" {
			// The process comes from the command line, with the
			// container's capabilities and any --cap added.
			return true, nil
		}
	default:
		return false, nil
	}
	admin, err := mayHoldSysAdmin(spec, cmd == "exec")
	if err != nil {
		return false, err
	}
	return !admin, nil
}

// optionValue is the value of the command's option long (or short) in
// args, "" if absent. runc's command options are given as "--bundle X",
// "-b X", or with "=".
func optionValue(args []string, long, short string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != long && name != short {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// capabilities are the OCI process's capability sets; only the bounding
// set matters: a process can never gain a capability outside it.
type capabilities struct {
	Bounding []string `json:"bounding"`
}

// mayHoldSysAdmin reads the OCI runtime spec at path (a whole config.json,
// or with process a process.json of runc exec) and reports whether its
// process has CAP_SYS_ADMIN in its bounding set.
func mayHoldSysAdmin(path string, process bool) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading the container's process: %w", err)
	}
	var caps *capabilities
	if process {
		var p struct {
			Capabilities *capabilities `json:"capabilities"`
		}
		err = json.Unmarshal(b, &p)
		caps = p.Capabilities
	} else {
		var s struct {
			Process *struct {
				Capabilities *capabilities `json:"capabilities"`
			} `json:"process"`
		}
		err = json.Unmarshal(b, &s)
		if s.Process != nil {
			caps = s.Process.Capabilities
		}
	}
	if err != nil {
		return false, fmt.Errorf("reading the container's process from %s: %w", path, err)
	}
	if caps == nil {
		return false, nil
	}
	return slices.Contains(caps.Bounding, "CAP_SYS_ADMIN"), nil
}
