package classparams

import (
	"io/fs"
	"maps"
	"math"
	"strconv"
	"testing"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/names"
)

// FuzzParse reads arbitrary class parameters: the two Plinth knows, each
// present or not, and one more key of any name. Whatever the input:
//   - a parameter Parse does not know is refused, and a refusal returns no
//     Params;
//   - an accepted root directory mode has permission bits only (never
//     setuid, setgid or sticky), is the octal number written, and is
//     DefaultRootDirMode when the class says nothing;
//   - an accepted over-commit ratio is the number written, from
//     volume.NoOvercommit to volume.MaxOvercommit, and NoOvercommit when
//     the class says nothing;
//   - a filesystem volume's attributes, read back as a class's
//     parameters, give the same root directory mode; a block volume's
//     are none.
//
// The seed corpus (TestParse's and the provisioner's refused parameters)
// runs with every `go test`; make test-fuzz fuzzes it briefly.
func FuzzParse(f *testing.F) {
	const (
		hasMode = 1 << iota
		hasRatio
		hasExtra
	)
	for _, s := range []struct {
		present            uint8
		mode, ratio        string
		extraKey, extraVal string
	}{
		{0, "", "", "", ""},
		{hasMode | hasRatio, "0750", "2.5", "", ""},
		{hasRatio | hasExtra, "", "2", "zeta", "1"},
		{hasExtra, "", "", "fsType", "ext4"},
		{hasMode, "2770", "", "", ""},
		{hasMode, "1777", "", "", ""},
		{hasMode, "0o770", "", "", ""},
		{hasMode, "u=rwx", "", "", ""},
		{hasMode, "", "", "", ""},
		{hasMode, "0999", "", "", ""},
		{hasMode, "750", "", "", ""},
		{hasRatio, "", "0.5", "", ""},
		{hasRatio, "", "NaN", "", ""},
		{hasExtra, "", "", names.ParameterRootDirMode, "0770"},
	} {
		f.Add(s.present, s.mode, s.ratio, s.extraKey, s.extraVal)
	}
	f.Fuzz(func(t *testing.T, present uint8, mode, ratio, extraKey, extraVal string) {
		params := map[string]string{}
		if present&hasMode != 0 {
			params[names.ParameterRootDirMode] = mode
		}
		if present&hasRatio != 0 {
			params[names.ParameterOvercommit] = ratio
		}
		if present&hasExtra != 0 {
			params[extraKey] = extraVal
		}
		in := maps.Clone(params)
		p, err := Parse(params)
		if !maps.Equal(params, in) {
			t.Fatalf("Parse changed its input %v to %v", in, params)
		}
		known := map[string]bool{}
		for _, k := range Supported() {
			known[k] = true
		}
		for k := range params {
			if !known[k] && err == nil {
				t.Fatalf("Parse(%q) accepted the unknown parameter %q: %+v", params, k, p)
			}
		}
		if err != nil {
			if p != (Params{}) {
				t.Fatalf("Parse(%q) refused (%v) but returned %+v", params, err, p)
			}
			return
		}

		if p.RootDirMode&^fs.ModePerm != 0 || p.RootDirMode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Fatalf("Parse(%q) accepted root directory mode %v (%#o): more than permission bits", params, p.RootDirMode, uint32(p.RootDirMode))
		}
		if v, ok := params[names.ParameterRootDirMode]; ok {
			n, perr := strconv.ParseUint(v, 8, 32)
			if perr != nil || fs.FileMode(n) != p.RootDirMode || len(v) < 3 || len(v) > 4 {
				t.Fatalf("Parse(%q) read root directory mode %q as %#o", params, v, uint32(p.RootDirMode))
			}
		} else if p.RootDirMode != volume.DefaultRootDirMode {
			t.Fatalf("Parse(%q) without %s: root directory mode %#o, want the default %#o",
				params, names.ParameterRootDirMode, uint32(p.RootDirMode), uint32(volume.DefaultRootDirMode))
		}

		r := float64(p.Overcommit)
		if math.IsNaN(r) || p.Overcommit < volume.NoOvercommit || p.Overcommit > volume.MaxOvercommit {
			t.Fatalf("Parse(%q) accepted over-commit %v, outside [%v, %v]", params, r, volume.NoOvercommit, volume.MaxOvercommit)
		}
		if v, ok := params[names.ParameterOvercommit]; ok {
			if want, perr := strconv.ParseFloat(v, 64); perr != nil || want != r {
				t.Fatalf("Parse(%q) read over-commit %q as %v", params, v, r)
			}
		} else if p.Overcommit != volume.NoOvercommit {
			t.Fatalf("Parse(%q) without %s: over-commit %v, want %v", params, names.ParameterOvercommit, r, volume.NoOvercommit)
		}

		attrs := p.VolumeAttributes(volume.Filesystem)
		again, err := Parse(attrs)
		if err != nil || again.RootDirMode != p.RootDirMode {
			t.Fatalf("Parse(%q) = %+v, whose filesystem attributes %q read back as %+v, %v", params, p, attrs, again, err)
		}
		if a := p.VolumeAttributes(volume.Block); a != nil {
			t.Fatalf("Parse(%q) = %+v: a block volume's attributes are %q, want none", params, p, a)
		}
	})
}
