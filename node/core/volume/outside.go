package volume

import (
	"context"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// ReleaseOutside searches the data filesystem outside the engine's own
// trees (enginePath) for files and directories carrying a volume's
// project ID, and gives each the ID releaseID says: ShareProjectID within
// the node share's directories, else 0. It is what the quota watch does
// when a volume's usage grows while nothing was written in it: a process
// that may change project IDs wrote a file somewhere else (an emptyDir, a
// container's layer) and moved it into the volume's project afterwards,
// which raises no event (fsquota's TestProjectIDChangeIsNotNotified).
// FirstStray is an absolute path.
//
// The search walks the mount that holds the volumes directory from its
// root, entering no other mount (fsquota.ReleaseTree): what is visible of
// the filesystem through that mount only, and not what other mounts of it
// show alone (a bind mount of a subdirectory made elsewhere is part of
// the same tree, and is seen). pace bounds its rate; it takes time in
// proportion to the files there. On a node that does not enforce quotas
// there is nothing to release.
func (m *Manager) ReleaseOutside(ctx context.Context, pace func(context.Context) error) (fsquota.Restored, error) {
	if m.ProjectIDs == nil {
		return fsquota.Restored{}, nil
	}
	root, err := mountRoot(m.Data.Volumes.FullPath())
	if err != nil {
		return fsquota.Restored{}, fmt.Errorf("releasing the volumes' project IDs outside the volumes: %w", err)
	}
	engine := m.engineTrees()
	var share []string
	if sh := m.share.set.Load(); sh != nil {
		share = sh.dirs
	}
	total, err := fsquota.ReleaseTree(ctx, root, FirstProjectID, LastProjectID, 0, append(engine, share...), pace)
	total.Rebase(root)
	for _, d := range share {
		if err != nil {
			break
		}
		var r fsquota.Restored
		r, err = fsquota.ReleaseTree(ctx, d, FirstProjectID, LastProjectID, ShareProjectID, engine, pace)
		r.Rebase(d)
		total.Add(r)
	}
	if err != nil {
		return total, fmt.Errorf("releasing the volumes' project IDs outside the volumes: %w", err)
	}
	return total, nil
}

// engineTrees are the trees of the data directory that only the engine
// writes (enginePath).
func (m *Manager) engineTrees() []string {
	return []string{m.Data.Volumes.FullPath(), m.Data.Quarantine.FullPath(), m.Data.Snapshots.FullPath(), m.Data.State.FullPath()}
}

// mountRoot returns the root of the mount holding dir: the nearest of dir
// and its parents that the kernel says is one (STATX_ATTR_MOUNT_ROOT,
// Linux >= 5.8), or "/".
func mountRoot(dir string) (string, error) {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_TYPE, &st); err != nil {
			return "", fmt.Errorf("finding the mount of %s: stat %s: %w", dir, p, err)
		}
		if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
			return "", fmt.Errorf("finding the mount of %s: the kernel does not say which directory is a mount's root", dir)
		}
		if st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 || p == "/" {
			return p, nil
		}
	}
}
