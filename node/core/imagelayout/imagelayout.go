// Package imagelayout names the paths inside a Plinth node image that the
// node relies on. build/nodeimage installs the programs and files at these
// paths and plinth-node's init and services look for them there; both
// import this package, so the image and the node cannot disagree about
// where anything is.
package imagelayout

const (
	// Init is the program the kernel starts: plinth-node.
	Init = "/init"
	// Kubelet is the kubelet the node runs.
	Kubelet = "/usr/bin/kubelet"
	// Runsc is gVisor's runsc, in images built with it; RunscShim is its
	// containerd shim, on containerd's PATH beside it.
	Runsc     = "/usr/bin/runsc"
	RunscShim = "/usr/bin/containerd-shim-runsc-v1"
	// ModuleList lists the kernel modules init loads at boot, in order
	// (kmod.FormatList); ModuleDir holds them, named <name>.ko.
	ModuleList = "/etc/plinth/modules.list"
	ModuleDir  = "/lib/modules"
	// ImageDir holds docker-archive tarballs the node imports into
	// containerd.
	ImageDir = "/usr/share/plinth/images"
	// CNIBinDir holds the CNI plugins (Debian's containernetworking-plugins).
	CNIBinDir = "/usr/lib/cni"
)
