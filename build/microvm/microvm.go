// Package microvm boots a Linux kernel in a qemu micro-VM (-machine
// microvm, TCG: this project's machines have no KVM) with virtio disks, an
// optional user-mode network with forwarded ports, and the serial console
// on a pipe. It is the one place that knows qemu's command line; the kernel
// tests, the boot tests and the node VM all start their VMs through it.
package microvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Disk is a raw disk image attached as a virtio-blk device.
type Disk struct {
	Path string
	// Serial names the disk inside the VM (/sys/block/vdX/serial), so the
	// guest need not depend on probe order.
	Serial string
	// ReadOnly attaches the image read-only.
	ReadOnly bool
	// Snapshot sends writes to a temporary overlay, leaving the image
	// pristine.
	Snapshot bool
}

// Forward forwards a TCP port of the host into the guest.
type Forward struct {
	// HostIP and HostPort are where qemu listens on the host. HostIP
	// empty means all addresses.
	HostIP   string
	HostPort int
	// GuestPort is the port in the guest (at the guest's user-network
	// address, 10.0.2.15).
	GuestPort int
}

// Config describes a VM.
type Config struct {
	Kernel string // an uncompressed vmlinux (PVH entry), as microvm boots it
	Initrd string
	// KernelArgs follow BaseKernelArgs on the kernel command line.
	KernelArgs []string
	// InitArgs, when set, follow "--" on the command line: arguments for
	// the guest's init.
	InitArgs []string
	Memory   string // qemu -m, e.g. "512M"
	CPUs     int
	Disks    []Disk
	// Network attaches a virtio-net device on qemu's user network
	// (guest 10.0.2.15/24, host 10.0.2.2, DNS 10.0.2.3).
	Network bool
	// Forwards are the host ports forwarded into the guest; they need
	// Network.
	Forwards []Forward
	// Console receives the console, one line (with its newline, without
	// the serial line's carriage return) per Write.
	Console io.Writer
}

// VM is a running qemu.
type VM struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error // qemu's exit, valid once done is closed

	mu    sync.Mutex
	lines []chan<- string
}

// BaseKernelArgs are the kernel arguments every micro-VM here boots with:
// the serial console, no reboot on panic (the VM just stops), no
// mitigations (TCG is slow enough), the i8042 probing microvm has no
// controller for, and the TSC rate, which the guest cannot calibrate: microvm
// has neither HPET nor an ACPI PM timer, and PIT calibration under TCG
// sometimes fails and hangs the boot. TCG reads the host's TSC, so its rate
// is the host's, and it is as steady as the host's: tsc=reliable keeps the
// guest from judging it unstable (its vCPUs' TSCs seem out of step under
// TCG), which left it only the jiffies clock, 4 ms steps in which no
// benchmark could read a latency.
func BaseKernelArgs() []string {
	args := []string{
		"console=ttyS0", "panic=-1", "mitigations=off", "no_timer_check", "random.trust_cpu=on", "tsc=reliable",
		"i8042.noaux", "i8042.nomux", "i8042.nopnp", "i8042.dumbkbd",
	}
	if khz := HostTSCkHz(); khz > 0 {
		args = append(args, "tsc_early_khz="+strconv.Itoa(khz))
	}
	return args
}

// HostTSCkHz returns the host's TSC rate in kHz, or 0 when unknown.
func HostTSCkHz() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return int(f * 1000)
			}
		}
	}
	return 0
}

// Args returns qemu's arguments for cfg.
func (cfg Config) Args() ([]string, error) {
	if cfg.Kernel == "" || cfg.Initrd == "" {
		return nil, errors.New("microvm: kernel and initrd are required")
	}
	if len(cfg.Forwards) > 0 && !cfg.Network {
		return nil, errors.New("microvm: port forwards need the network")
	}
	mem, cpus := cfg.Memory, cfg.CPUs
	if mem == "" {
		mem = "512M"
	}
	if cpus == 0 {
		cpus = 1
	}
	kargs := append(BaseKernelArgs(), cfg.KernelArgs...)
	if len(cfg.InitArgs) > 0 {
		kargs = append(append(kargs, "--"), cfg.InitArgs...)
	}
	args := []string{
		"-machine", "microvm", "-accel", "tcg", "-cpu", "max",
		"-m", mem, "-smp", strconv.Itoa(cpus),
		// mon:stdio multiplexes qemu's monitor on the console, so that
		// "Ctrl-a b" on stdin sends a serial break (see SysRq).
		"-nographic", "-nodefaults", "-no-reboot", "-serial", "mon:stdio",
		"-kernel", cfg.Kernel, "-initrd", cfg.Initrd, "-append", strings.Join(kargs, " "),
	}
	for i, d := range cfg.Disks {
		if strings.ContainsAny(d.Path, ",") || strings.ContainsAny(d.Serial, ", ") {
			return nil, fmt.Errorf("microvm: disk %q: qemu options cannot hold a comma", d.Path)
		}
		id := "d" + strconv.Itoa(i)
		drive := "id=" + id + ",file=" + d.Path + ",if=none,format=raw"
		if d.ReadOnly {
			drive += ",readonly=on"
		}
		if d.Snapshot {
			drive += ",snapshot=on,cache=unsafe"
		}
		dev := "virtio-blk-device,drive=" + id
		if d.Serial != "" {
			dev += ",serial=" + d.Serial
		}
		args = append(args, "-drive", drive, "-device", dev)
	}
	if cfg.Network {
		netdev := "user,id=n0"
		for _, f := range cfg.Forwards {
			if f.HostIP != "" && net.ParseIP(f.HostIP) == nil {
				return nil, fmt.Errorf("microvm: forward: %q is not an IP address", f.HostIP)
			}
			netdev += fmt.Sprintf(",hostfwd=tcp:%s:%d-:%d", f.HostIP, f.HostPort, f.GuestPort)
		}
		args = append(args, "-netdev", netdev, "-device", "virtio-net-device,netdev=n0")
	}
	return args, nil
}

// Start boots the VM. It runs until the guest powers off, Kill, or ctx ends
// (which kills it).
func Start(ctx context.Context, cfg Config) (*VM, error) {
	args, err := cfg.Args()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	// qemu in its own process group: a Ctrl-C on the terminal is the
	// caller's to handle, not qemu's to die of.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	v := &VM{cmd: cmd, stdin: in, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	console := cfg.Console
	if console == nil {
		console = io.Discard
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := strings.TrimRight(sc.Text(), "\r")
			io.WriteString(console, l+"\n")
			v.mu.Lock()
			for _, ch := range v.lines {
				select {
				case ch <- l:
				default: // a watcher that stopped reading misses lines
				}
			}
			v.mu.Unlock()
		}
		v.err = cmd.Wait()
		close(v.done)
	}()
	return v, nil
}

// Done is closed when qemu has exited.
func (v *VM) Done() <-chan struct{} { return v.done }

// Err is qemu's exit status, once Done is closed.
func (v *VM) Err() error {
	<-v.done
	return v.err
}

// PID is qemu's process ID.
func (v *VM) PID() int { return v.cmd.Process.Pid }

// Kill ends qemu at once: for the guest, a power cut.
func (v *VM) Kill() error {
	select {
	case <-v.done:
		return nil
	default:
	}
	if err := v.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing qemu: %w", err)
	}
	<-v.done
	return nil
}

// SysRq sends the magic SysRq key to the guest kernel: a serial break
// (qemu's "Ctrl-a b") followed by the key. The guest needs
// sysrq_always_enabled on its command line.
func (v *VM) SysRq(key byte) error {
	if _, err := v.stdin.Write([]byte{0x01, 'b'}); err != nil {
		return fmt.Errorf("sysrq: %w", err)
	}
	// The kernel takes the key that follows the break as the command.
	time.Sleep(200 * time.Millisecond)
	if _, err := v.stdin.Write([]byte{key}); err != nil {
		return fmt.Errorf("sysrq: %w", err)
	}
	return nil
}

// WaitLine waits until a console line printed after this call contains
// want, and returns it.
func (v *VM) WaitLine(ctx context.Context, want string) (string, error) {
	ch := make(chan string, 1024)
	v.mu.Lock()
	v.lines = append(v.lines, ch)
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		for i, c := range v.lines {
			if c == ch {
				v.lines = append(v.lines[:i], v.lines[i+1:]...)
				break
			}
		}
		v.mu.Unlock()
	}()
	for {
		select {
		case l := <-ch:
			if strings.Contains(l, want) {
				return l, nil
			}
		case <-v.done:
			return "", fmt.Errorf("VM ended before its console showed %q (qemu: %v)", want, v.err)
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %q on the console: %w", want, ctx.Err())
		}
	}
}
