package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/pkg/mountinfo"
)

// node is one plinth-node csi-serve over its own tree, and the
// publications the benchmark made through it.
type node struct {
	bin, dir string
	n        int
	args     []string
	readyz   string
	proc     *cluster.Process
	// published are the volumes published, in order, and their targets.
	published []publication
}

type publication struct{ id, target string }

// setUpWorkers is how many calls the benchmark makes at once while it
// fills the node: enough to keep both cores busy.
const setUpWorkers = 4

// volumeBytes is each volume's size: the smallest the engine makes, so
// that the promise of 10,000 of them fits any host's filesystem.
const volumeBytes = 1 << 20

func newNode(bin, tmp string, n int) (*node, error) {
	dir := filepath.Join(tmp, fmt.Sprintf("n%d", n))
	for _, d := range []string{"data", "kubelet", "ephemeral"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return &node{
		bin: bin, dir: dir, n: n,
		readyz: "http://" + addr + "/readyz",
		args: []string{"csi-serve",
			"--endpoint=unix://" + filepath.Join(dir, "csi.sock"),
			"--controller-endpoint=unix://" + filepath.Join(dir, "controller.sock"),
			"--data-dir=" + filepath.Join(dir, "data"),
			"--kubelet-dir=" + filepath.Join(dir, "kubelet"),
			"--ephemeral-dir=" + filepath.Join(dir, "ephemeral"),
			"--node-name=restart-node",
			"--metrics-address=" + addr,
			"--allow-unenforced-capacity",
		},
	}, nil
}

// freePort is a TCP port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start execs plinth-node and returns when it is ready, with the time
// since the exec.
func (nd *node) start(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	p, err := cluster.StartProcess("plinth-node", nd.bin, nd.args, nil, filepath.Join(nd.dir, "plinth-node.log"))
	if err != nil {
		return 0, err
	}
	nd.proc = p
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(nd.readyz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(t0), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-p.Done():
			return 0, fmt.Errorf("plinth-node exited while starting (log: %s)", filepath.Join(nd.dir, "plinth-node.log"))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// kill ends plinth-node with SIGKILL, as the OOM killer or a node
// agent's crash would, and waits until it is gone.
func (nd *node) kill() {
	if nd.proc == nil {
		return
	}
	_ = syscall.Kill(-nd.proc.Pid(), syscall.SIGKILL)
	<-nd.proc.Done()
	nd.proc = nil
}

// client is the CSI client of the node's endpoint; endpoint is "csi" or
// "controller".
func (nd *node) client(endpoint string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+filepath.Join(nd.dir, endpoint+".sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// populate starts plinth-node, makes the volumes and then publishes every
// other one, and returns how long each of the two took.
func (nd *node) populate(ctx context.Context) (create, publish time.Duration, err error) {
	if _, err := nd.start(ctx); err != nil {
		return 0, 0, err
	}
	cc, err := nd.client("controller")
	if err != nil {
		return 0, 0, err
	}
	defer cc.Close()
	nc, err := nd.client("csi")
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	ctrl, pub := csi.NewControllerClient(cc), csi.NewNodeClient(nc)
	ids := make([]string, nd.n)
	t0 := time.Now()
	if err := cluster.Parallel(nd.n, setUpWorkers, func(i int) error {
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name:               fmt.Sprintf("pvc-restart-%05d", i),
			CapacityRange:      &csi.CapacityRange{RequiredBytes: volumeBytes},
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
		})
		if err != nil {
			return fmt.Errorf("creating volume %d: %w", i, err)
		}
		ids[i] = resp.GetVolume().GetVolumeId()
		return nil
	}); err != nil {
		return 0, 0, err
	}
	create = time.Since(t0)
	t0 = time.Now()
	nd.published = make([]publication, nd.n/2)
	err = cluster.Parallel(nd.n/2, setUpWorkers, func(i int) error {
		dir := filepath.Join(nd.dir, "kubelet", "pods", fmt.Sprintf("pod-%05d", i), "volumes", "kubernetes.io~csi", fmt.Sprintf("pv-%05d", i))
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		p := publication{id: ids[2*i], target: filepath.Join(dir, "mount")}
		// Recorded before the call: a publication the call made but
		// did not answer is unpublished all the same.
		nd.published[i] = p
		if _, err := pub.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: p.id, TargetPath: p.target, VolumeCapability: mountCapability(),
		}); err != nil {
			return fmt.Errorf("publishing volume %s: %w", p.id, err)
		}
		return nil
	})
	return create, time.Since(t0), err
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// killAndRestart kills plinth-node, execs it again, and returns the time
// from the exec to ready and to every publication's health answered.
func (nd *node) killAndRestart(ctx context.Context) (ready, checked time.Duration, err error) {
	nd.kill()
	t0 := time.Now()
	if ready, err = nd.start(ctx); err != nil {
		return 0, 0, err
	}
	conn, err := nd.client("csi")
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	c := csi.NewNodeClient(conn)
	for _, p := range nd.published {
		// With the publish path: NotFound unless the plugin still has
		// the publication's record.
		resp, err := c.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: p.id, VolumePublishPath: p.target})
		if err != nil {
			return 0, 0, fmt.Errorf("checking volume %s: %w", p.id, err)
		}
		if h := resp.GetVolumeHealth().GetHealthStatuses(); len(h) > 0 {
			return 0, 0, fmt.Errorf("volume %s is not healthy after the restart: %s", p.id, h[0].GetMessage())
		}
	}
	return ready, time.Since(t0), nil
}

// cleanUp unpublishes every publication through the plugin (in a fresh
// plinth-node, as one being started or killed may not answer), stops it,
// and then unmounts whatever is still mounted below the node's directory.
// Once no mount is left, the node's tree is removed, its log kept when
// something failed. It fails if a mount is left.
func (nd *node) cleanUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var errs []error
	nd.kill()
	if _, err := nd.start(ctx); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, nd.unpublishAll(ctx))
	}
	if nd.proc != nil {
		nd.proc.Stop()
		nd.proc = nil
	}
	if err := unmountUnder(nd.dir); err != nil {
		// Never remove a tree with a mount in it: that would
		// remove the volume's files through the mount.
		return fmt.Errorf("cleaning up %s: %w", nd.dir, errors.Join(append(errs, err)...))
	}
	for _, d := range []string{"data", "kubelet", "ephemeral"} {
		errs = append(errs, os.RemoveAll(filepath.Join(nd.dir, d)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up %s: %w", nd.dir, err)
	}
	return os.RemoveAll(nd.dir)
}

func (nd *node) unpublishAll(ctx context.Context) error {
	conn, err := nd.client("csi")
	if err != nil {
		return err
	}
	defer conn.Close()
	c := csi.NewNodeClient(conn)
	return cluster.Parallel(len(nd.published), setUpWorkers, func(i int) error {
		p := nd.published[i]
		if p.id == "" {
			return nil
		}
		if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: p.id, TargetPath: p.target}); err != nil {
			return fmt.Errorf("unpublishing volume %s: %w", p.id, err)
		}
		return nil
	})
}

// unmountUnder detaches every mount below dir, the deepest first, and
// fails if the mount table still shows one afterwards.
func unmountUnder(dir string) error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	under := mountinfo.Under(mounts, dir)
	slices.SortFunc(under, func(a, b mountinfo.Mount) int {
		return strings.Count(b.MountPoint, "/") - strings.Count(a.MountPoint, "/")
	})
	for _, m := range under {
		_ = syscall.Unmount(m.MountPoint, syscall.MNT_DETACH)
	}
	if mounts, err = mountinfo.Read(); err != nil {
		return err
	}
	if left := mountinfo.Under(mounts, dir); len(left) > 0 {
		return fmt.Errorf("%d mounts left below %s, the first %s", len(left), dir, left[0].MountPoint)
	}
	if len(under) > 0 {
		fmt.Fprintf(os.Stderr, "restart: unmounted %d mounts the plugin had not unpublished below %s\n", len(under), dir)
	}
	return nil
}
