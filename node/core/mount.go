package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/mountinfo"
)

// ensureMounted mounts m at target unless something is mounted there
// already (a restarted datadir runnable, or a mount done by the boot
// environment). It reports whether it mounted.
func ensureMounted(ctx context.Context, log logtree.LeveledLogger, m *DataMount, target string) (bool, error) {
	mounted, err := IsMountPoint(target)
	if err != nil {
		return false, fmt.Errorf("mounting data partition: %w", err)
	}
	if mounted {
		return false, nil
	}
	formatted := false
	if m.FormatIfBlank {
		if formatted, err = formatIfBlank(ctx, log, m); err != nil {
			return false, fmt.Errorf("mounting data partition: %w", err)
		}
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return false, fmt.Errorf("mounting data partition: creating mount point: %w", err)
	}
	// nosuid,nodev: nothing on the data partition is a program or device
	// we mean to honour; volumes are exposed to pods through their own
	// bind mounts and loop devices. This holds with the kubelet's and
	// containerd's roots on the partition too: nosuid and nodev act per
	// mount, and what runs or is opened there does so through mounts of
	// its own (a container's overlay root, a block volume's bind mount of
	// /dev/loopN, which carries /dev's flags), never through an inode of
	// the data filesystem seen through this mount.
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount(m.Source, target, m.FSType, flags, m.Options); err != nil {
		err = fmt.Errorf("mounting data partition %s (%s, options %q) at %s: %w", m.Source, m.FSType, m.Options, target, err)
		if m.FormatIfBlank && !formatted {
			// Say why the node did not format it either.
			err = fmt.Errorf("%w; the device is not blank (its first MiB has data), so the node did not format it: %w", err, ErrNotBlank)
		}
		return false, err
	}
	return true, nil
}

// IsMountPoint reports whether path is a mount point according to the
// kernel's mount table of this process (/proc/self/mountinfo). Comparing
// device numbers with the parent would miss bind mounts of the same
// filesystem; the mount table does not.
func IsMountPoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	// The table lists canonical paths; resolve links the way the kernel
	// did when the mount was made. A missing path is not a mount point.
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	} else if os.IsNotExist(err) {
		return false, nil
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return false, err
	}
	return len(mountinfo.At(mounts, abs)) > 0, nil
}
