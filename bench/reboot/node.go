package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/nodevm"
)

// world is the control plane on this host and the VM node joined to it,
// with the node's console recorded.
type world struct {
	cp      *launch.ControlPlane
	node    *nodevm.Node
	console *console
	dir     string
	boots   int
	// timeout bounds one reboot, to the probe's first byte.
	timeout time.Duration
}

// startWorld starts the control plane and boots the node for the first
// time (a blank data disk, formatted at this boot).
func startWorld(ctx context.Context, dir, image, kernel string, timeout time.Duration) (_ *world, err error) {
	cp, err := launch.StartControlPlane(ctx, launch.ControlPlaneConfig{
		Dir: filepath.Join(dir, "cp"), Scheduler: true, StorageObjects: true, SnapshotAPI: true,
	})
	if err != nil {
		return nil, err
	}
	w := &world{cp: cp, console: &console{}, dir: dir, timeout: timeout}
	w.node, err = nodevm.New(nodevm.Config{
		Dir: filepath.Join(dir, "node"), Kernel: kernel, Image: image, ControlPlane: cp,
		DataSize: 2 << 30,
		// Verbosity 1 logs each CSI call (NodeGetInfo, the kubelet
		// registering the plugin; NodePublishVolume) and each runnable
		// turning healthy: the timeline's milestones.
		KernelArgs: []string{"plinth.verbosity=1"},
		Console:    w.console,
	})
	if err != nil {
		return nil, errors.Join(err, cp.Stop(context.WithoutCancel(ctx)))
	}
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if err := w.bootLog(); err != nil {
		return w, err
	}
	if err := w.node.Boot(bctx); err != nil {
		return w, err
	}
	if err := w.node.WaitReady(bctx); err != nil {
		return w, w.hung(err)
	}
	fmt.Printf("reboot: first boot (blank data disk) Ready with storage in %.1f s\n", time.Since(start).Seconds())
	return w, nil
}

// bootLog sends the next boot's console to its own file.
func (w *world) bootLog() error {
	w.boots++
	return w.console.startBoot(filepath.Join(w.dir, fmt.Sprintf("console-%02d.log", w.boots)))
}

// hangError is a reboot that did not reach the probe's line while the
// guest kernel reported itself stuck (a soft lockup, an RCU stall).
type hangError struct{ msg string }

func (e *hangError) Error() string { return e.msg }

// hung adds to err what the console shows of a stuck guest kernel, and
// where the console log is. If the kernel reported a lockup, it first
// asks it for every CPU's stack (SysRq 9: console loglevel 9, in case
// the node's loglevel=5 hides some; then SysRq l: a backtrace of every
// active CPU), gives it stackWait to print them, and returns a
// *hangError. The lockup reports' own stacks are on the console.
func (w *world) hung(err error) error {
	console := filepath.Join(w.dir, fmt.Sprintf("console-%02d.log", w.boots))
	msg := fmt.Sprintf("%v (console: %s)", err, console)
	l := lockups(w.console.snapshot())
	if len(l) == 0 {
		return errors.New(msg)
	}
	if vm := w.node.VM(); vm != nil {
		before := len(w.console.snapshot())
		if serr := errors.Join(vm.SysRq('9'), vm.SysRq('l')); serr != nil {
			msg += fmt.Sprintf("; asking for the CPUs' stacks: %v", serr)
		}
		time.Sleep(stackWait)
		if after := w.console.snapshot(); len(after) > before {
			l = append(l, "after SysRq 9 and l:")
			for _, x := range after[before:min(len(after), before+60)] {
				l = append(l, x.text)
			}
		}
	}
	return &hangError{msg: msg + "; the guest kernel reported a lockup:\n\t" + strings.Join(l, "\n\t")}
}

// stackWait is how long a stuck guest gets to print its CPUs' stacks on
// the serial console.
const stackWait = 15 * time.Second

// recoverNode brings a node whose boot hung back to where the next reboot
// can be measured: power cut, boot, Ready, the probe's line of the new
// boot. None of it is measured.
func (w *world) recoverNode(ctx context.Context, p *probe) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if err := w.node.PowerCut(); err != nil {
		return err
	}
	if err := w.bootLog(); err != nil {
		return err
	}
	if err := w.node.Boot(ctx); err != nil {
		return err
	}
	if err := w.node.WaitReady(ctx); err != nil {
		return w.hung(err)
	}
	node, err := w.cp.Client.CoreV1().Nodes().Get(ctx, w.node.Name(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	_, err = nodevm.WaitLog(ctx, w.cp.Client, p.ns, p.pod, nodevm.FoundPrefix(node.Status.NodeInfo.BootID), false, w.timeout)
	return err
}

// close stops the node and the control plane.
func (w *world) close(ctx context.Context) error {
	err := w.node.Close(ctx)
	w.console.close()
	return errors.Join(err, w.cp.Stop(ctx))
}

// reboot reboots the node (cleanly, or by cutting its power) under the
// probe p and returns the boot's milestones, up to the probe's first byte
// after it; the probe must have read back its markers.
func (w *world) reboot(ctx context.Context, clean bool, p *probe) (m milestones, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	m.reboot = time.Now()
	if clean {
		err = w.node.Stop(ctx, 3*time.Minute)
	} else {
		err = w.node.PowerCut()
	}
	if err != nil {
		return m, fmt.Errorf("stopping the node: %w", err)
	}
	m.off = time.Now()
	if err := w.bootLog(); err != nil {
		return m, err
	}
	if err := w.node.Boot(ctx); err != nil {
		return m, err
	}
	m.on = time.Now()
	var ready nodeReady
	ready.watch(ctx, w)
	if err := w.node.WaitReady(ctx); err != nil {
		return m, w.hung(err)
	}
	node, err := w.cp.Client.CoreV1().Nodes().Get(ctx, w.node.Name(), metav1.GetOptions{})
	if err != nil {
		return m, err
	}
	prefix := nodevm.FoundPrefix(node.Status.NodeInfo.BootID)
	l, err := nodevm.WaitLog(ctx, w.cp.Client, p.ns, p.pod, prefix, true, w.timeout)
	if err != nil {
		return m, w.hung(err)
	}
	if err := p.check(l, prefix); err != nil {
		return m, err
	}
	stamp, _, _ := cutWord(l)
	guest, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return m, fmt.Errorf("the probe's line %q: %w", l, err)
	}
	if m.nodeReady, err = ready.wait(ctx); err != nil {
		return m, err
	}
	if err := guestMilestones(&m, w.console.snapshot(), guest); err != nil {
		return m, fmt.Errorf("boot %d: %w", w.boots, err)
	}
	return m, nil
}

// cutWord splits s at its first space.
func cutWord(s string) (string, string, bool) { return strings.Cut(s, " ") }

// nodeReady is when this host saw the Node Ready with a new boot ID, by a
// watch (not second-granular, as the condition's transition time is).
type nodeReady struct {
	done chan struct{}
	mu   sync.Mutex
	at   time.Time
	err  error
}

func (r *nodeReady) watch(ctx context.Context, w *world) {
	r.done = make(chan struct{})
	lw := cache.NewListWatchFromClient(w.cp.Client.CoreV1().RESTClient(), "nodes", "",
		fields.OneTermEqualSelector("metadata.name", w.node.Name()))
	go func() {
		defer close(r.done)
		_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				return false, nil
			}
			ready, _ := w.node.Booted(n)
			if ready {
				r.mu.Lock()
				r.at = time.Now()
				r.mu.Unlock()
			}
			return ready, nil
		})
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}()
}

func (r *nodeReady) wait(ctx context.Context) (time.Time, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("watching the Node: %w", ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return time.Time{}, fmt.Errorf("watching the Node: %w", r.err)
	}
	return r.at, nil
}
