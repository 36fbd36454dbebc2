package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/build/microvm"
	"source.plinth.dev/build/nodeimage"
	"source.plinth.dev/node/core/nodeconfig"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/images"
)

// The node boot tests boot a whole node: plinth-node as PID 1 with a
// configuration disk, running containerd and the kubelet in the VM, from
// the node image (build/nodeimage) built around this test's plinth-node.

var (
	nodeImageOnce sync.Once
	nodeImage     string
	// nodeImages is how many container images the node image carries
	// (the node imports them all before the kubelet starts).
	nodeImages   int
	nodeImageErr error
)

func prepareNodeImage(t *testing.T, e bootEnv) string {
	t.Helper()
	nodeImageOnce.Do(func() { nodeImage, nodeImages, nodeImageErr = buildNodeImage(e) })
	if nodeImageErr != nil {
		t.Fatal(nodeImageErr)
	}
	return nodeImage
}

// buildNodeImage builds the node image's test variant (the tests' images
// added) with the boot tests' plinth-node as /init, into the work
// directory (its own cache, removed with it).
func buildNodeImage(e bootEnv) (string, int, error) {
	root, _ := repoRoot()
	if out, err := exec.Command(filepath.Join(root, "build/scripts/apt-install.sh"), nodeimage.DebianPackages...).CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("installing the node's packages: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(root, "third_party/kubernetes/build.sh")).Output()
	if err != nil {
		return "", 0, fmt.Errorf("getting the kubelet: %v", err)
	}
	kubelet := filepath.Join(strings.TrimSpace(string(out)), "kubelet")
	ctx := context.Background()
	imgDir := filepath.Join(e.workDir, "node-images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return "", 0, err
	}
	imgs, err := nodeimage.NodeImages(ctx, root, imgDir)
	if err != nil {
		return "", 0, err
	}
	// The test variant: the pods these tests run need busybox.
	testImgs, err := images.WriteNodeTestImages(ctx, root, imgDir)
	if err != nil {
		return "", 0, err
	}
	imgs = append(imgs, testImgs...)
	img, err := nodeimage.Build(ctx, nodeimage.NodeInputs(filepath.Join(e.workDir, "plinth-node"), kubelet, e.modDir, imgs), filepath.Join(e.workDir, "node-image-cache"))
	if err != nil {
		return "", 0, fmt.Errorf("building the node image: %w", err)
	}
	return img.Path, len(imgs), nil
}

// testNode is the node.json of the tests (the contract's example).
func testNode() nodeconfig.Node {
	return nodeconfig.Node{
		NodeName:    "plinth-vm",
		Address:     netip.MustParsePrefix("10.0.2.15/24"),
		Gateway:     netip.MustParseAddr("10.0.2.2"),
		NodeIP:      netip.MustParseAddr("10.0.77.2"),
		KubeletPort: 10250,
		PodCIDR:     netip.MustParsePrefix("10.244.0.0/24"),
		ClusterDNS:  netip.MustParseAddr("10.96.0.10"),
	}
}

// writeConfigDisk writes cfg as a configuration disk of 1 MiB, the way the
// host side does.
func writeConfigDisk(t *testing.T, dir string, cfg nodeconfig.Config) string {
	t.Helper()
	var b bytes.Buffer
	if err := nodeconfig.Write(&b, cfg); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.img")
	if err := os.WriteFile(p, append(b.Bytes(), make([]byte, 1<<20-b.Len())...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dataDisk returns a sparse data disk of 1 GiB; fill, if set, gets it
// formatted XFS and mounted, to put files on it before the boot.
func dataDisk(t *testing.T, dir string, fill func(mnt string)) string {
	t.Helper()
	p := filepath.Join(dir, "data.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	if fill == nil {
		return p
	}
	if out, err := exec.Command("mkfs.xfs", "-q", p).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v\n%s", err, out)
	}
	d, err := loop.Create(f, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Detach()
	mnt := t.TempDir()
	if err := unix.Mount(d.Path(), mnt, "xfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	fill(mnt)
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// helloPod is a static pod on the pod network that writes its address to
// the VM's console (a privileged container with the console as a host
// path) every few seconds.
const helloPod = `apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  containers:
  - name: hello
    image: plinth.local/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, 'while true; do echo "pod-says-hello from $(ip -4 -o addr show eth0 | awk "{print \$4}")" > /host-console; sleep 3; done']
    securityContext: {privileged: true}
    volumeMounts: [{name: console, mountPath: /host-console}]
  volumes: [{name: console, hostPath: {path: /dev/console, type: CharDevice}}]
`

// killerPod kills the kubelet once (hostPID; a marker on a host path keeps
// it from doing so again after the kubelet is back): the node must restart
// the kubelet, which must then run its pods again.
const killerPod = `apiVersion: v1
kind: Pod
metadata: {name: kubelet-killer, namespace: default}
spec:
  hostPID: true
  restartPolicy: OnFailure
  containers:
  - name: killer
    image: plinth.local/busybox:1
    imagePullPolicy: Never
    command: [sh, -c, 'if [ ! -e /marker/killed ]; then sleep 15; touch /marker/killed; echo "killer: killing kubelet $(pidof kubelet)" > /host-console; kill -9 $(pidof kubelet); fi']
    securityContext: {privileged: true}
    volumeMounts: [{name: marker, mountPath: /marker}, {name: console, mountPath: /host-console}]
  volumes:
  - {name: marker, hostPath: {path: /run/kubelet-killer, type: DirectoryOrCreate}}
  - {name: console, hostPath: {path: /dev/console, type: CharDevice}}
`

// TestBootNodeRunsPod boots a node with a configuration disk without
// kubeconfigs (standalone kubelet) and a data disk that already holds
// static pods (a second boot: the disk must be kept, not formatted), and
// watches containerd, the kubelet and a pod on the pod network come up on
// the console; then a pod kills the kubelet, and the node must restart it.
func TestBootNodeRunsPod(t *testing.T) {
	e := prepareBoot(t)
	initrd := prepareNodeImage(t, e)
	dir := t.TempDir()
	cfgDisk := writeConfigDisk(t, dir, nodeconfig.Config{Node: testNode()})
	data := dataDisk(t, dir, func(mnt string) {
		m := filepath.Join(mnt, "kubelet", "manifests")
		if err := os.MkdirAll(m, 0o750); err != nil {
			t.Fatal(err)
		}
		for name, pod := range map[string]string{"hello.yaml": helloPod, "killer.yaml": killerPod} {
			if err := os.WriteFile(filepath.Join(m, name), []byte(pod), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	if st, err := os.Stat(initrd); err == nil {
		t.Logf("node initrd: %d MiB", st.Size()>>20)
	}
	start := time.Now()
	v := bootVM(t, microvm.Config{Kernel: e.kernel, Initrd: initrd, Memory: "3G", CPUs: 2, Disks: []microvm.Disk{{Path: data}, {Path: cfgDisk}}, Network: true},
		[]string{"plinth.data=/dev/vda", "plinth.config=/dev/vdb", "plinth.onfailure=poweroff", "plinth.haltdelay=0s"})
	mark := func(what string, want ...string) {
		t.Helper()
		v.expectWithin(t, 5*time.Minute, want...)
		t.Logf("%6.1fs  %s", time.Since(start).Seconds(), what)
	}
	mark("node process started", "node process")
	mark("configuration read", "configuration disk /dev/vdb: node plinth-vm")
	mark("data partition mounted (kept)", "mounted data partition /dev/vda")
	mark("network up", "network up: eth0 10.0.2.15/24 via 10.0.2.2, node IP 10.0.77.2 on lo")
	mark("containerd ready", "containerd is ready")
	mark("images imported", fmt.Sprintf("imported %d images", nodeImages))
	mark("kubelet healthy", "kubelet running as node plinth-vm, standalone")
	mark("pod running on the pod network", "pod-says-hello from 10.244.0.")
	mark("kubelet killed by a pod", "killer: killing kubelet")
	mark("kubelet failure seen", "failed: kubelet (pid")
	mark("kubelet restarted", "started kubelet --config")
	mark("kubelet healthy again", "kubelet is ready")
	mark("pod still saying hello", "pod-says-hello from 10.244.0.")
	con := v.console()
	if strings.Contains(con, "formatting it as XFS") {
		t.Error("the node formatted a disk that already had its filesystem")
	}
	if strings.Contains(con, "Kernel panic") {
		t.Error("kernel panic on the console")
	}
}

// TestBootFormatsBlankDataDisk: with a configuration disk, a blank data
// disk is formatted XFS on the first boot and mounted with project quotas.
func TestBootFormatsBlankDataDisk(t *testing.T) {
	e := prepareBoot(t)
	initrd := prepareNodeImage(t, e)
	dir := t.TempDir()
	cfgDisk := writeConfigDisk(t, dir, nodeconfig.Config{Node: testNode()})
	data := dataDisk(t, dir, nil)
	v := bootVM(t, microvm.Config{Kernel: e.kernel, Initrd: initrd, Memory: "3G", CPUs: 2, Disks: []microvm.Disk{{Path: data}, {Path: cfgDisk}}, Network: true},
		[]string{"plinth.data=/dev/vda", "plinth.config=/dev/vdb", "plinth.onfailure=poweroff", "plinth.haltdelay=0s"})
	v.expectWithin(t, 3*time.Minute, "data partition /dev/vda is blank", "mounted data partition /dev/vda", "project quotas enforced", "containerd is ready")
}
