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

	"source.plinth.dev/build/ktest/initramfs"
	"source.plinth.dev/node/core/nodeconfig"
	"source.plinth.dev/pkg/kmod"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/images"
)

// The node boot tests boot a whole node: plinth-node as PID 1 with a
// configuration disk, running containerd and the kubelet in the VM.
//
// Until the node image builder (build/nodeimage) lands, nodeInitrd collects
// the image itself, minimally: the contract's binaries with the shared
// libraries ldd names, the modules, the test images. It is a stand-in for
// the builder, not a second one: it goes when the builder comes.

// nodeModules are the kernel modules a node needs (NODE-CONTRACT).
var nodeModules = []string{"virtio_mmio", "virtio_blk", "virtio_net", "xfs", "overlay", "bridge", "veth", "loop", "br_netfilter"}

// nodeBinaries are the programs of the node image, at their image path,
// taken from the same path on this host (Debian packages), except the
// kubelet.
var nodeBinaries = []string{
	"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/bin/ctr", "/usr/sbin/runc",
	"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback",
	"/usr/sbin/mkfs.xfs",
}

var (
	nodeImageOnce sync.Once
	nodeImage     string
	nodeImageErr  error
)

func prepareNodeImage(t *testing.T, e bootEnv) string {
	t.Helper()
	nodeImageOnce.Do(func() { nodeImage, nodeImageErr = writeNodeInitrd(e) })
	if nodeImageErr != nil {
		t.Fatal(nodeImageErr)
	}
	return nodeImage
}

func writeNodeInitrd(e bootEnv) (string, error) {
	root, _ := repoRoot()
	if out, err := exec.Command(filepath.Join(root, "build/scripts/apt-install.sh"),
		"containerd", "runc", "containernetworking-plugins", "busybox-static", "xfsprogs").CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing the node's packages: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(root, "third_party/kubernetes/build.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("getting the kubelet: %v", err)
	}
	kubelet := filepath.Join(strings.TrimSpace(string(out)), "kubelet")

	p := filepath.Join(e.workDir, "node-initrd.cpio")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	w := initramfs.NewWriter(f)
	w.CharDev("dev/console", 5, 1)
	w.Dir("tmp")
	add := func(name, src string, perm os.FileMode) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		w.File(name, perm, b)
		return nil
	}
	if err := add("init", filepath.Join(e.workDir, "plinth-node"), 0o755); err != nil {
		return "", err
	}
	if err := add("usr/bin/kubelet", kubelet, 0o755); err != nil {
		return "", err
	}
	libs := map[string]bool{}
	for _, b := range append(slicesClone(nodeBinaries), kubelet) {
		if !strings.HasSuffix(b, "/kubelet") {
			if err := add(b, b, 0o755); err != nil {
				return "", err
			}
		}
		ls, err := sharedLibraries(b)
		if err != nil {
			return "", err
		}
		for _, l := range ls {
			libs[l] = true
		}
	}
	for l := range libs {
		if err := add(l, l, 0o755); err != nil {
			return "", err
		}
	}
	for _, name := range []string{"bin/busybox", "bin/sh", "bin/mount", "bin/umount"} {
		if err := add(name, "/bin/busybox", 0o755); err != nil {
			return "", err
		}
	}
	mods, err := initramfs.Modules(e.modDir, nodeModules)
	if err != nil {
		return "", err
	}
	var list []string
	for _, m := range mods {
		ko, err := os.ReadFile(m.Path)
		if err != nil {
			return "", err
		}
		name := "/lib/modules/" + m.Name + ".ko"
		w.File(name, 0o644, initramfs.StripSignature(ko))
		list = append(list, name)
	}
	w.File(bootModuleList, 0o644, kmod.FormatList(list))
	w.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	w.File("etc/group", 0o644, []byte("root:x:0:\n"))
	w.File("etc/hosts", 0o644, []byte("127.0.0.1 localhost\n"))
	w.File("etc/resolv.conf", 0o644, []byte("nameserver 10.0.2.3\n"))
	ctx := context.Background()
	pause, err := images.Pause(ctx, root)
	if err != nil {
		return "", err
	}
	busybox, err := images.Busybox(ctx, images.DefaultBusybox)
	if err != nil {
		return "", err
	}
	for name, img := range map[string]images.Image{"pause": pause, "busybox": busybox} {
		var b bytes.Buffer
		if err := img.WriteArchive(&b); err != nil {
			return "", err
		}
		w.File("usr/share/plinth/images/"+name+".tar", 0o644, b.Bytes())
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return p, f.Close()
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// sharedLibraries lists what ldd resolves for bin, the dynamic loader
// included (none for a static binary).
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v\n%s", bin, err, out)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
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
	v := bootVM(t, vmConfig{kernel: e.kernel, initrd: initrd, memory: "3G", cpus: 2, disks: []string{data, cfgDisk}, net: true},
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
	mark("images imported", "imported 2 images")
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
	v := bootVM(t, vmConfig{kernel: e.kernel, initrd: initrd, memory: "3G", cpus: 2, disks: []string{data, cfgDisk}, net: true},
		[]string{"plinth.data=/dev/vda", "plinth.config=/dev/vdb", "plinth.onfailure=poweroff", "plinth.haltdelay=0s"})
	v.expectWithin(t, 3*time.Minute, "data partition /dev/vda is blank", "mounted data partition /dev/vda", "project quotas enforced", "containerd is ready")
}
