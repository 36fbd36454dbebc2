// Package classparams is the one reader of the parameters a StorageClass
// gives Plinth's volumes. The provisioner reads a class's parameters here
// before it makes a volume, the capacity publisher before it says how much
// room the class has, and the development CSI controller (csi-serve) reads
// a CreateVolume call's parameters here too; with one reader, the three
// cannot disagree on what a class asks for.
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
	var unknown []string
	for k := range params {
		if readers[k] == nil {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Params{}, fmt.Errorf("unknown parameters %s; %s supports only %s",
			strings.Join(unknown, ", "), names.DriverName, strings.Join(Supported(), ", "))
	}
	for _, k := range Supported() {
		if v, ok := params[k]; ok {
			if err := readers[k](v, &p); err != nil {
				return Params{}, fmt.Errorf("parameter %s: %w", k, err)
			}
		}
	}
	return p, nil
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
