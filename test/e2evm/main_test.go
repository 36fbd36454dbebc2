// Package e2evm tests Plinth on a Plinth node: the node image booted in a
// qemu VM (plinth-node as PID 1 supervising containerd, the kubelet and the
// storage services, XFS project quotas enforced), joined to a control plane
// on this host. `make test-e2e-vm` runs it; without PLINTH_E2E_VM=1 (as in
// `go test ./...`) every test skips.
//
// The environment names what to boot: PLINTH_K8S_BIN (Kubernetes
// binaries), PLINTH_KERNEL (vmlinux) and PLINTH_NODE_IMAGE (the initramfs
// of build/nodeimage). All tests share one node, booted once; a test that
// reboots it leaves it Ready.
package e2evm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/nodevm"
)

// bootTimeout bounds one boot to Ready. Under TCG on two shared cores a
// boot takes a minute or two; this only catches a node that never comes.
const bootTimeout = 10 * time.Minute

type world struct {
	cp   *launch.ControlPlane
	node *nodevm.Node
	// ready is how long the first boot took from qemu's start to a Ready
	// node with its CSI plugin registered.
	ready time.Duration
	// firstCut is how long after that the first boot's power was cut
	// (cutFirstBoot).
	firstCut time.Duration
}

var (
	setupOnce sync.Once
	theWorld  *world
	setupErr  error
	workDir   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theWorld != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		if err := theWorld.node.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "e2evm: stopping the node: %v\n", err)
			code = 1
		}
		if err := theWorld.cp.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "e2evm: stopping the control plane: %v\n", err)
			code = 1
		}
		cancel()
		if code == 0 {
			os.RemoveAll(workDir)
		} else {
			fmt.Fprintf(os.Stderr, "e2evm: work directory kept: %s\n", workDir)
		}
	}
	os.Exit(code)
}

// vmWorld returns the shared control plane and VM node, booting them on
// first use.
func vmWorld(t *testing.T) *world {
	t.Helper()
	if os.Getenv("PLINTH_E2E_VM") != "1" {
		t.Skip("VM node test: run with make test-e2e-vm (PLINTH_E2E_VM=1)")
	}
	setupOnce.Do(func() { theWorld, setupErr = setUp() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return theWorld
}

func setUp() (*world, error) {
	kernel, image := os.Getenv("PLINTH_KERNEL"), os.Getenv("PLINTH_NODE_IMAGE")
	if kernel == "" || image == "" {
		return nil, fmt.Errorf("PLINTH_KERNEL and PLINTH_NODE_IMAGE must name the kernel and the node image (make test-e2e-vm sets them)")
	}
	var err error
	if workDir, err = os.MkdirTemp("", "plinth-e2evm-"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	w := &world{}
	w.cp, err = launch.StartControlPlane(ctx, launch.ControlPlaneConfig{
		Dir: filepath.Join(workDir, "cp"), Scheduler: true, StorageObjects: true, SnapshotAPI: true,
	})
	if err != nil {
		return nil, err
	}
	w.node, err = nodevm.New(nodevm.Config{
		Dir: filepath.Join(workDir, "node"), Kernel: kernel, Image: image, ControlPlane: w.cp,
		// Small: the infeasible resize must exceed it, and a sparse
		// image costs nothing until written.
		DataSize: 2 << 30,
		// Words after "--" go to plinth-node: the quota audit every 20 s
		// (default 10 min), for TestQuotaEscapeRepaired, which also reads
		// plinth-node's metrics.
		KernelArgs:  []string{"--", "--volume-audit-interval=20s"},
		MetricsPort: nodevm.MetricsPort,
	})
	if err != nil {
		w.cp.Stop(ctx)
		return nil, err
	}
	// From here on w is returned, and TestMain stops both.
	start := time.Now()
	if err := w.node.Boot(ctx); err != nil {
		return w, err
	}
	if err := w.node.WaitReady(ctx); err != nil {
		return w, fmt.Errorf("%w (console logs in %s)", err, filepath.Join(workDir, "node"))
	}
	w.ready = time.Since(start)
	fmt.Fprintf(os.Stderr, "e2evm: node %s Ready with storage %.1fs after qemu started\n", w.node.Name(), w.ready.Seconds())
	return w, w.cutFirstBoot(ctx)
}

// cutFirstBoot ends the node's first boot with a power cut, as a new
// node's may end, and boots it again. That boot imported the node's
// images, and containerd unpacked them into its snapshots without syncing
// them; a cut within the kernel's writeback delay (30 s) left them empty,
// though recorded as unpacked, and no pod sandbox started on the node
// again. TestFirstBootSurvivesPowerCut checks what the cut left.
func (w *world) cutFirstBoot(ctx context.Context) error {
	ready := time.Now()
	if err := w.node.PowerCut(); err != nil {
		return fmt.Errorf("cutting the first boot's power: %w", err)
	}
	w.firstCut = time.Since(ready)
	if err := w.node.Boot(ctx); err != nil {
		return err
	}
	if err := w.node.WaitReady(ctx); err != nil {
		return fmt.Errorf("%w, after the first boot's power cut (console logs in %s)", err, filepath.Join(workDir, "node"))
	}
	fmt.Fprintf(os.Stderr, "e2evm: node %s Ready again after a power cut %.1fs after its first boot was Ready\n", w.node.Name(), w.firstCut.Seconds())
	return nil
}
