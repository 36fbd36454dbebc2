package core

import (
	"errors"
	"fmt"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
)

// DataDir is the prepared data directory: its placed tree and what its
// filesystem can do, as found once at start. It has no setters: every
// runnable that holds one sees the same facts, and a changed fact (a
// remount) means a new DataDir from a new PrepareDataDir.
type DataDir struct {
	tree     *localstorage.DataDirectory
	quotaErr error
}

// DataDirOptions configures PrepareDataDir.
type DataDirOptions struct {
	// ProbeQuota reports whether the filesystem holding a directory
	// enforces project quotas; nil means fsquota.Probe. Tests that must
	// run on any filesystem replace it.
	ProbeQuota func(dir string) error
}

// PrepareDataDir creates the declared data tree below d (which must be
// placed and, on a real node, mounted) and probes its filesystem for
// project-quota enforcement. Missing quota support is not an error here:
// block volumes work without it, so it is recorded and surfaces when a
// filesystem volume is requested (the volume manager, built with
// QuotaProbeError, refuses it then, unless the operator accepted
// unenforced capacity).
func PrepareDataDir(d *localstorage.DataDirectory, opts DataDirOptions) (*DataDir, error) {
	if !d.Placed() {
		return nil, errors.New("preparing data directory: the tree was never placed")
	}
	if err := d.MkdirAll(); err != nil {
		return nil, fmt.Errorf("preparing data directory: %w", err)
	}
	probe := opts.ProbeQuota
	if probe == nil {
		probe = fsquota.Probe
	}
	// Quotas are set on volume directories, so probe where they live.
	// Any failure counts as "not enforced", including a failure to find
	// out (an odd errno from quotactl): capacity we cannot verify is
	// capacity we must not promise, and block volumes still work, so the
	// node starts either way and carries the reason.
	qerr := probe(d.Volumes.FullPath())
	return &DataDir{tree: d, quotaErr: qerr}, nil
}

// Tree is the placed, created data tree. Treat it as read-only.
func (d *DataDir) Tree() *localstorage.DataDirectory { return d.tree }

// QuotaEnforced reports whether the data filesystem enforces project quotas.
func (d *DataDir) QuotaEnforced() bool { return d.quotaErr == nil }

// QuotaProbeError says why quotas are not enforced (nil if they are).
func (d *DataDir) QuotaProbeError() error { return d.quotaErr }
