// Package images builds the container images the tests' nodes need, as
// OCI archives (pkg/ociimage) that `ctr images import` loads into
// containerd: the host's test cluster (test/launch) loads all of them, the
// node image's test variant the tests' own (WriteNodeTestImages); the
// node image itself ships only the sandbox image (build/nodeimage).
//
// No registry is reachable from CI, so nothing is pulled: every image is a
// single layer written from local files (a static Go program, built by
// build/goimage; the Debian busybox-static binary) without docker or any
// image tool; the same inputs give the same image ID. deploy/'s image of
// plinth-node is written the same way (build/containerimage).
package images

import "source.plinth.dev/pkg/ociimage"

// Image references. Pods must use imagePullPolicy: Never (or IfNotPresent),
// since kubelet cannot pull from the made-up registry host.
const (
	// PauseRef is the sandbox image configured in containerd.
	PauseRef = "plinth.local/pause:1"
	// BusyboxRef is a general-purpose test image with a shell and the
	// busybox applets (dd, stat, sleep, ...).
	BusyboxRef = "plinth.local/busybox:1"
	// PersistentVolumeRef is the e2e test workload (test/e2e/persistentvolume),
	// which checks its claims from inside the pod.
	PersistentVolumeRef = "plinth.local/persistentvolume:1"
)

// File is one entry of an image's only layer.
type File = ociimage.File

// Image is a single-layer image; WriteFile writes its archive.
type Image = ociimage.Image
