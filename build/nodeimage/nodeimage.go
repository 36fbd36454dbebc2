// Package nodeimage builds the Plinth node's OS image: the initramfs that
// is the node's whole, immutable root filesystem, laid out at the paths
// node/core/imagelayout names (docs/design.md, "The node image", says
// what the image and plinth-node agree on). plinth-node is its /init;
// beside it are Debian's containerd, runc, CNI plugins, mkfs.xfs and
// busybox, the patched kubelet, every shared library those need, the
// kernel modules the node loads and the container images it imports.
//
// The image is built from files on this host, never from a package
// manager inside a root, so it needs no root, chroot or network. Its bytes
// depend only on the contents of its inputs (no timestamps, owners or
// directory order), and it is cached under a key hashed from exactly those
// contents and the builder's own identity: a rebuild with the same inputs
// reuses the cached image.
package nodeimage

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"source.plinth.dev/build/initramfs"
	"source.plinth.dev/node/core/imagelayout"
	"source.plinth.dev/pkg/kmod"
)

// Program is an executable copied into the image. Its libraries are
// resolved from Host: a program whose RPATH or RUNPATH uses $ORIGIN must
// sit at the same path in the image as on the host.
type Program struct {
	// Path inside the image.
	Path string
	// Host is the file on this host; a symlink is followed.
	Host string
}

// DebianPrograms are the Debian-packaged programs of the image layout, at
// the paths the Debian packages install them (containerd runc
// containernetworking-plugins xfsprogs busybox-static).
func DebianPrograms() []Program {
	return []Program{
		{Path: "/usr/bin/containerd", Host: "/usr/bin/containerd"},
		{Path: "/usr/bin/containerd-shim-runc-v2", Host: "/usr/bin/containerd-shim-runc-v2"},
		{Path: "/usr/bin/ctr", Host: "/usr/bin/ctr"},
		{Path: "/usr/sbin/runc", Host: "/usr/sbin/runc"},
		{Path: imagelayout.CNIBinDir + "/bridge", Host: "/usr/lib/cni/bridge"},
		{Path: imagelayout.CNIBinDir + "/host-local", Host: "/usr/lib/cni/host-local"},
		{Path: imagelayout.CNIBinDir + "/loopback", Host: "/usr/lib/cni/loopback"},
		{Path: "/sbin/mkfs.xfs", Host: "/sbin/mkfs.xfs"},
		{Path: BusyboxPath, Host: "/bin/busybox"},
	}
}

// GVisorPrograms are gVisor's runsc and its containerd shim, static
// programs from dir (third_party/gvisor/build.sh), at imagelayout.Runsc
// and imagelayout.RunscShim: a node whose image has runsc gives containerd the runsc
// runtime.
func GVisorPrograms(dir string) []Program {
	return []Program{
		{Path: imagelayout.Runsc, Host: filepath.Join(dir, "runsc")},
		{Path: imagelayout.RunscShim, Host: filepath.Join(dir, "containerd-shim-runsc-v1")},
	}
}

// DebianPackages are the packages DebianPrograms come from.
var DebianPackages = []string{"containerd", "runc", "containernetworking-plugins", "xfsprogs", "busybox-static"}

// BusyboxPath is where busybox lives in the image; BusyboxLinks are the
// applets linked to it (the kubelet execs mount and umount).
const BusyboxPath = "/bin/busybox"

var BusyboxLinks = []string{"/bin/mount", "/bin/umount", "/bin/sh"}

// DefaultModules are the kernel modules the node loads at boot (with
// their dependencies): disks on the microvm machine, XFS, overlayfs for
// containerd's snapshotter, the CNI bridge and veth pairs with bridged
// traffic seen by netfilter, and loop devices for block volumes.
var DefaultModules = []string{"virtio_mmio", "virtio_blk", "virtio_net", "xfs", "overlay", "bridge", "veth", "loop", "br_netfilter"}

// Inputs are everything an image is made of.
type Inputs struct {
	// Init is the static program run as /init: plinth-node on a node,
	// a checking program in the boot test.
	Init string
	// Kubelet is the patched kubelet (third_party/kubernetes/build.sh).
	Kubelet string
	// Programs are further programs; DebianPrograms on a node.
	Programs []Program
	// ModDir is lib/modules/<version> of the kernel the image boots with;
	// Modules the modules to take from it (with their dependencies).
	ModDir  string
	Modules []string
	// Images are docker-archive tarballs, stored under imagelayout.ImageDir by their
	// base names.
	Images []string
	// Compression of the archive: "none", "gzip" or "lz4".
	Compression string
	// Builder identifies the builder (a hash of its executable), so a
	// changed builder never reuses an image an older one made.
	Builder string
}

// DefaultCompression is what the node boots. Measured on the boot test's
// image (192 MiB of cpio) under TCG, 2 vCPUs: none boots to /init in 3.1s,
// lz4 in 2.9s at 74 MiB, gzip in 5.4s at 65 MiB; lz4 costs 7s to write
// (the lz4 tool, -9), gzip 8s. lz4 is as fast as no compression (qemu
// copies less) at a third of the size.
const DefaultCompression = "lz4"

// NodeInputs returns the inputs of a node image: the given init (plinth-
// node, or a test's stand-in), kubelet, kernel modules directory and
// container images, with the Debian programs, DefaultModules and
// DefaultCompression. Builder is left for the caller.
func NodeInputs(init, kubelet, modDir string, images []string) Inputs {
	return Inputs{
		Init:        init,
		Kubelet:     kubelet,
		Programs:    DebianPrograms(),
		ModDir:      modDir,
		Modules:     append([]string(nil), DefaultModules...),
		Images:      images,
		Compression: DefaultCompression,
	}
}

// entry is one archive member of the plan.
type entry struct {
	path   string
	mode   fs.FileMode // permission bits of a file
	kind   byte        // 'd' directory, 'f' file, 'l' symlink, 'c' /dev/console
	source string      // host file of a file without data
	data   []byte      // content of a file (when source is empty)
	link   string
	strip  bool // a kernel module: drop its signature
}

// plan lists the archive's members in archive order.
func plan(in Inputs) ([]entry, error) {
	var es []entry
	dir := func(p string) { es = append(es, entry{path: p, kind: 'd'}) }
	file := func(p string, mode fs.FileMode, data []byte) {
		es = append(es, entry{path: p, kind: 'f', mode: mode, data: data})
	}
	es = append(es, entry{path: "/dev/console", kind: 'c'})
	for _, d := range []string{"/proc", "/sys", "/tmp", "/run", "/var"} {
		dir(d)
	}
	if in.Init == "" {
		return nil, fmt.Errorf("no init program")
	}
	if err := requireStatic(in.Init); err != nil {
		return nil, err
	}
	es = append(es, entry{path: imagelayout.Init, kind: 'f', mode: 0o755, source: in.Init})

	progs := append([]Program{}, in.Programs...)
	if in.Kubelet != "" {
		progs = append(progs, Program{Path: imagelayout.Kubelet, Host: in.Kubelet})
	}
	hosts := make([]string, 0, len(progs))
	seen := map[string]bool{}
	for _, p := range progs {
		if seen[p.Path] {
			return nil, fmt.Errorf("two programs at %s", p.Path)
		}
		seen[p.Path] = true
		real, err := filepath.EvalSymlinks(p.Host)
		if err != nil {
			return nil, fmt.Errorf("program %s: %w", p.Path, err)
		}
		es = append(es, entry{path: p.Path, kind: 'f', mode: 0o755, source: real})
		hosts = append(hosts, real)
		if p.Path == BusyboxPath {
			for _, l := range BusyboxLinks {
				es = append(es, entry{path: l, kind: 'l', link: path.Base(BusyboxPath)})
			}
		}
	}
	libs, err := initramfs.LibSearch{}.Libraries(hosts)
	if err != nil {
		return nil, fmt.Errorf("resolving shared libraries: %w", err)
	}
	for _, l := range libs {
		if seen[l.Path] {
			continue // a program that is also a library (the loader)
		}
		if l.Link != "" {
			es = append(es, entry{path: l.Path, kind: 'l', link: l.Link})
		} else {
			es = append(es, entry{path: l.Path, kind: 'f', mode: 0o755, source: l.Source})
		}
	}

	if len(in.Modules) > 0 {
		mods, err := initramfs.Modules(in.ModDir, in.Modules)
		if err != nil {
			return nil, err
		}
		var list []string
		for _, m := range mods {
			p := imagelayout.ModuleDir + "/" + m.Name + ".ko"
			es = append(es, entry{path: p, kind: 'f', mode: 0o644, source: m.Path, strip: true})
			list = append(list, p)
		}
		file(imagelayout.ModuleList, 0o644, kmod.FormatList(list))
	}

	names := map[string]string{}
	for _, img := range in.Images {
		base := filepath.Base(img)
		if !strings.HasSuffix(base, ".tar") {
			return nil, fmt.Errorf("image %s: want a docker-archive .tar", img)
		}
		if other, ok := names[base]; ok {
			return nil, fmt.Errorf("images %s and %s have the same name", other, img)
		}
		names[base] = img
		es = append(es, entry{path: imagelayout.ImageDir + "/" + base, kind: 'f', mode: 0o644, source: img})
	}

	file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	file("/etc/group", 0o644, []byte("root:x:0:\n"))
	file("/etc/hosts", 0o644, []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"))
	file("/etc/resolv.conf", 0o644, []byte("nameserver 10.0.2.3\n"))
	dir("/root")
	return es, nil
}

// requireStatic fails for a dynamically linked init. The node's init must
// not depend on the libraries it is meant to supervise programs with, and
// the kernel's only report of an init it cannot start is a panic.
func requireStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("init %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("init %s is dynamically linked; build it with CGO_ENABLED=0", p)
		}
	}
	return nil
}

// content returns a file entry's bytes as they go into the archive.
func (e entry) content() ([]byte, error) {
	if e.source == "" {
		return e.data, nil
	}
	b, err := os.ReadFile(e.source)
	if err != nil {
		return nil, err
	}
	if e.strip {
		b = initramfs.StripSignature(b)
	}
	return b, nil
}

// keyVersion changes when the meaning of a key changes.
const keyVersion = "plinth-nodeimage-1"

// key hashes the plan: every member's path, type, mode and content, the
// compression and the builder. Equal keys mean equal images.
func key(in Inputs, es []entry) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", keyVersion, in.Compression, in.Builder)
	for _, e := range es {
		fmt.Fprintf(h, "%c\x00%s\x00%o\x00%s\x00", e.kind, e.path, e.mode, e.link)
		if e.kind == 'f' {
			b, err := e.content()
			if err != nil {
				return "", err
			}
			sum := sha256.Sum256(b)
			h.Write(sum[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// writeArchive writes the plan as a newc cpio archive; manifest gets one
// line per member.
func writeArchive(w io.Writer, manifest io.Writer, es []entry) error {
	cw := initramfs.NewWriter(w)
	for _, e := range es {
		switch e.kind {
		case 'd':
			cw.Dir(e.path)
			fmt.Fprintf(manifest, "d %s\n", e.path)
		case 'c':
			cw.CharDev(e.path, 5, 1)
			fmt.Fprintf(manifest, "c %s\n", e.path)
		case 'l':
			cw.Symlink(e.path, e.link)
			fmt.Fprintf(manifest, "l %s -> %s\n", e.path, e.link)
		case 'f':
			b, err := e.content()
			if err != nil {
				return err
			}
			cw.File(e.path, e.mode, b)
			src := e.source
			if src == "" {
				src = "(generated)"
			}
			fmt.Fprintf(manifest, "f %s %o %d %s\n", e.path, e.mode, len(b), src)
		}
	}
	return cw.Close()
}
