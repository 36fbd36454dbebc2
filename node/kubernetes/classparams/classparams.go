// Package classparams is the one reader of the parameters a StorageClass
// gives Plinth's volumes, and a VolumeSnapshotClass its snapshots. The
// provisioner reads a class's parameters here before it makes a volume,
// the capacity publisher before it says how much room the class has, the
// snapshot controller before it makes a snapshot, and the development CSI
// controller (csi-serve) reads a CreateVolume or CreateSnapshot call's
// parameters here too; with one reader, they cannot disagree on what a
// class asks for.
//
// Unknown parameters are refused rather than ignored: a user who asks for,
// say, a filesystem type must not get a volume that silently lacks it.
package classparams

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/names"
)

// Params are what a class's parameters ask of its volumes.
type Params struct {
	// RootDirMode is the mode of a filesystem volume's root directory
	// (names.ParameterRootDirMode, octal such as "0770", see
	// volume.ParseRootDirMode); without the parameter,
	// volume.DefaultRootDirMode (0777), so that pods running as any user
	// can write. A block volume has no directory: a block claim of such a
	// class is served as usual.
	RootDirMode fs.FileMode
	// Overcommit is the ratio by which the class's volumes may over-commit
	// the room promised to filesystem volumes (names.ParameterOvercommit,
	// a ratio from 1, see volume.Overcommit); without the parameter,
	// volume.NoOvercommit.
	Overcommit volume.Overcommit
}

// readers reads each supported parameter into Params.
var readers = map[string]func(string, *Params) error{
	names.ParameterRootDirMode: func(v string, p *Params) (err error) {
		p.RootDirMode, err = volume.ParseRootDirMode(v)
		return err
	},
	names.ParameterOvercommit: func(v string, p *Params) (err error) {
		p.Overcommit, err = volume.ParseOvercommit(v)
		return err
	},
}

// Supported lists the parameters Parse accepts, sorted.
func Supported() []string { return slices.Sorted(maps.Keys(readers)) }

// Parse reads params. Any error means the parameters cannot make a volume
// until a user changes them; it names the parameter, in words meant for
// the user who reads it in an Event or a gRPC status.
func Parse(params map[string]string) (Params, error) {
	p := Params{RootDirMode: volume.DefaultRootDirMode, Overcommit: volume.NoOvercommit}
	if err := parse(params, readers, &p); err != nil {
		return Params{}, err
	}
	return p, nil
}

// SnapshotParams are what a VolumeSnapshotClass's parameters ask of its
// snapshots.
type SnapshotParams struct {
	// Overcommit is the ratio by which a snapshot's reservation (the
	// blocks it shares with its volume, which a write to either side
	// makes real) may take room promised to filesystem volumes and other
	// copies (names.ParameterOvercommit, as for a StorageClass); without
	// the parameter, volume.NoOvercommit: every snapshot's share of blocks
	// stays reserved.
	Overcommit volume.Overcommit
}

// snapshotReaders reads each parameter a VolumeSnapshotClass may give.
var snapshotReaders = map[string]func(string, *SnapshotParams) error{
	names.ParameterOvercommit: func(v string, p *SnapshotParams) (err error) {
		p.Overcommit, err = volume.ParseOvercommit(v)
		return err
	},
}

// ParseSnapshot reads a VolumeSnapshotClass's params (as the
// csi-snapshotter passes them to CreateSnapshot: those prefixed
// "csi.storage.k8s.io/" are the sidecar's own and never reach here). Its
// errors are Parse's, for the snapshot class.
func ParseSnapshot(params map[string]string) (SnapshotParams, error) {
	p := SnapshotParams{Overcommit: volume.NoOvercommit}
	if err := parse(params, snapshotReaders, &p); err != nil {
		return SnapshotParams{}, err
	}
	return p, nil
}

// SnapshotOptions are the volume engine's options for a snapshot made
// with p (volume.Manager.CreateSnapshot).
func (p SnapshotParams) SnapshotOptions() []volume.CreateOption {
	return []volume.CreateOption{volume.WithOvercommit(p.Overcommit)}
}

// parse reads params into p with readers, refusing any parameter readers
// do not know, and reading the others in a fixed order.
func parse[P any](params map[string]string, readers map[string]func(string, *P) error, p *P) error {
	supported := slices.Sorted(maps.Keys(readers))
	var unknown []string
	for k := range params {
		if readers[k] == nil {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unknown parameters %s; %s supports only %s",
			strings.Join(unknown, ", "), names.DriverName, strings.Join(supported, ", "))
	}
	for _, k := range supported {
		if v, ok := params[k]; ok {
			if err := readers[k](v, p); err != nil {
				return fmt.Errorf("parameter %s: %w", k, err)
			}
		}
	}
	return nil
}

// CreateOptions are the volume engine's options for a volume of mode made
// with p. Over-commit applies to both modes (a block volume's image takes
// room that filesystem volumes were promised); only a filesystem volume
// has a root directory.
func (p Params) CreateOptions(mode volume.Mode) []volume.CreateOption {
	opts := []volume.CreateOption{volume.WithOvercommit(p.Overcommit)}
	if mode == volume.Filesystem {
		opts = append(opts, volume.WithRootDirMode(p.RootDirMode))
	}
	return opts
}

// CopyOptions are the volume engine's options, besides the one naming its
// source (volume.FromSnapshot, volume.FromVolume), for a copy made with p:
// over-commit only. A copy's root directory is its source's, so a class's
// root directory mode, which describes the new volumes it makes, does not
// apply to a restore or a clone in that class (and the engine would refuse
// it); neither the provisioner nor csi-serve's CreateVolume gives it. A
// copy's volume attributes record no mode for the same reason.
func (p Params) CopyOptions() []volume.CreateOption {
	return []volume.CreateOption{volume.WithOvercommit(p.Overcommit)}
}

// VolumeAttributes are what a PV (or a CSI volume context) of mode records
// of p, so that the object says all it takes to make the volume again,
// whatever the class or the defaults become later: a filesystem volume's
// root directory mode, the default included. Over-commit is not recorded:
// it describes the node's accounting when the volume was made, not the
// volume.
func (p Params) VolumeAttributes(mode volume.Mode) map[string]string {
	if mode != volume.Filesystem {
		return nil
	}
	return map[string]string{names.ParameterRootDirMode: volume.FormatRootDirMode(p.RootDirMode)}
}
