package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/loop"
)

// The node's data directory is an XFS filesystem, as on a real Plinth node,
// so that project quotas, reflinks and fallocate behave the same. It lives in
// a sparse image file in the work directory, attached to a loop device with
// autoclear: once the filesystem is unmounted the kernel frees the device by
// itself, so even a crashed launcher cannot leak it past the unmount.

// dataFS describes the mounted data filesystem.
type dataFS struct {
	image string
	mount string
	// quota is true when XFS accepted the prjquota mount option; the
	// kernel of some hosts (no CONFIG_XFS_QUOTA) cannot enforce quotas.
	quota bool
}

// mountDataFS creates image (size bytes, sparse), formats it as XFS and
// mounts it at mountPoint, with project quotas if the kernel supports them;
// with directIO the loop device reads and writes image with direct I/O
// (Config.DataDirectIO).
func mountDataFS(ctx context.Context, image, mountPoint string, size int64, directIO bool) (*dataFS, error) {
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating data image: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("sizing data image: %w", err)
	}
	// mkfs.xfs writes through the file, not the loop device, so nothing is
	// attached yet when it fails. reflink=1 (the default since xfsprogs
	// 5.1, named so other defaults cannot drop it): snapshots and clones
	// need it.
	if out, err := exec.CommandContext(ctx, "mkfs.xfs", "-q", "-m", "reflink=1", image).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("formatting data image: mkfs.xfs: %w: %s (install xfsprogs)", err, out)
	}
	dev, err := loop.Create(f, loop.Options{Autoclear: true, DirectIO: directIO})
	if err != nil {
		return nil, fmt.Errorf("attaching data image: %w", err)
	}
	// Closing our descriptor is safe once mounted: the mount holds the
	// device, and autoclear detaches it when the mount goes away. If the
	// mount fails, closing detaches it right here.
	defer dev.Close()
	if directIO {
		if fl, err := dev.Flags(); err != nil || !fl.DirectIO {
			return nil, fmt.Errorf("attaching data image %s with direct I/O: the kernel runs %s buffered (flags %+v, %v)", image, dev.Path(), fl, err)
		}
	}
	if err := os.MkdirAll(mountPoint, 0o755); err != nil {
		return nil, fmt.Errorf("creating data mount point: %w", err)
	}
	fs := &dataFS{image: image, mount: mountPoint, quota: true}
	err = unix.Mount(dev.Path(), mountPoint, "xfs", 0, "prjquota")
	if errors.Is(err, unix.EINVAL) {
		// XFS rejects quota options on kernels built without
		// CONFIG_XFS_QUOTA ("quota support not available in this kernel").
		fs.quota = false
		err = unix.Mount(dev.Path(), mountPoint, "xfs", 0, "")
	}
	if err != nil {
		return nil, fmt.Errorf("mounting data filesystem %s on %s: %w", dev.Path(), mountPoint, err)
	}
	// Shared, as / is on a systemd host: the kubelet's directory is on it,
	// and a CSI plugin in a pod (deploy/'s DaemonSet) mounts it with
	// Bidirectional propagation, which the runtime refuses on a private
	// mount.
	if err := unix.Mount("", mountPoint, "", unix.MS_SHARED, ""); err != nil {
		unix.Unmount(mountPoint, 0)
		return nil, fmt.Errorf("making data filesystem %s shared: %w", mountPoint, err)
	}
	return fs, nil
}
