package core

import (
	"errors"
	"fmt"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/pkg/fsquota"
)

// ErrCapacityNotEnforced is wrapped by DataDir.CheckFilesystemProvisioning
// when filesystem volumes must be refused: the data filesystem cannot
// enforce their size and the operator has not accepted that. The volume
// manager refuses such volumes with its own volume.ErrCapacityNotEnforced.
var ErrCapacityNotEnforced = errors.New("capacity of filesystem volumes cannot be enforced")

// AllowUnenforcedCapacityFlag is the command-line flag that accepts
// filesystem volumes without an enforced size. Error messages name it so a
// user knows what to change.
const AllowUnenforcedCapacityFlag = "--allow-unenforced-capacity"

// DataDir is the prepared data directory: its placed tree and what its
// filesystem can do, as found once at start. It has no setters: every
// runnable that holds one sees the same facts, and a changed fact (a
// remount) means a new DataDir from a new PrepareDataDir.
type DataDir struct {
	tree            *localstorage.DataDirectory
	quotaErr        error
	allowUnenforced bool
}

// DataDirOptions configures PrepareDataDir.
type DataDirOptions struct {
	// AllowUnenforcedCapacity accepts filesystem volumes when project
	// quotas are not enforced (their size is then only a number in the
	// API). Meant for development hosts whose kernel lacks quota support.
	AllowUnenforcedCapacity bool
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
// QuotaProbeError, refuses it then).
//
// Both plinth-node's datadir runnable and the standalone csi-serve use it,
// so the two can never disagree about what the data directory can do.
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
	return &DataDir{tree: d, quotaErr: qerr, allowUnenforced: opts.AllowUnenforcedCapacity}, nil
}

// Tree is the placed, created data tree. Treat it as read-only.
func (d *DataDir) Tree() *localstorage.DataDirectory { return d.tree }

// QuotaEnforced reports whether the data filesystem enforces project quotas.
func (d *DataDir) QuotaEnforced() bool { return d.quotaErr == nil }

// QuotaProbeError says why quotas are not enforced (nil if they are).
func (d *DataDir) QuotaProbeError() error { return d.quotaErr }

// AllowUnenforcedCapacity is the operator's setting: accept filesystem
// volumes even when QuotaEnforced is false.
func (d *DataDir) AllowUnenforcedCapacity() bool { return d.allowUnenforced }

// CapacityUnenforced reports that filesystem volumes are provisioned
// although their size is not enforced. The root's datadir runnable uses it
// to log a loud warning at start. The controllers do not: they ask the
// volume manager (volume.Manager.CapacityEnforced and UnenforcedCapacity),
// which is where the provisioner's CapacityNotEnforced Events come from.
func (d *DataDir) CapacityUnenforced() bool { return d.quotaErr != nil && d.allowUnenforced }

// CheckFilesystemProvisioning returns nil when a filesystem volume may be
// created, and otherwise an error wrapping ErrCapacityNotEnforced that says
// why and what to do. Only tests call it: the volume manager applies the
// same rule to the volumes it makes (volume.ErrCapacityNotEnforced), and
// the message users see in Events and gRPC status messages is that one.
func (d *DataDir) CheckFilesystemProvisioning() error {
	if d.quotaErr == nil || d.allowUnenforced {
		return nil
	}
	return fmt.Errorf("refusing filesystem volume: %w: %v; fix the data filesystem, or start plinth-node with %s to provision without size enforcement",
		ErrCapacityNotEnforced, d.quotaErr, AllowUnenforcedCapacityFlag)
}
