package classparams

import (
	"maps"
	"strings"
	"testing"

	"source.plinth.dev/node/core/volume"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		want    Params
		wantErr string // substring; empty: valid
	}{
		{name: "none", want: Params{RootDirMode: volume.DefaultRootDirMode, Overcommit: volume.NoOvercommit}},
		{name: "both", params: map[string]string{"rootDirMode": "0750", "overcommit": "2.5"},
			want: Params{RootDirMode: 0o750, Overcommit: 2.5}},
		{name: "unknown, sorted", params: map[string]string{"zeta": "1", "fsType": "ext4", "overcommit": "2"},
			wantErr: "unknown parameters fsType, zeta; storage.plinth.dev supports only overcommit, rootDirMode"},
		{name: "bad mode", params: map[string]string{"rootDirMode": "2770"}, wantErr: "parameter rootDirMode: "},
		{name: "bad ratio", params: map[string]string{"overcommit": "0.5"}, wantErr: "parameter overcommit: "},
		{name: "ratio not a number", params: map[string]string{"overcommit": "NaN"}, wantErr: "parameter overcommit: "},
	} {
		got, err := Parse(tc.params)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: Parse(%v) = %v", tc.name, tc.params, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: Parse(%v) = %+v, %v; want an error containing %q", tc.name, tc.params, got, err, tc.wantErr)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("%s: Parse(%v) = %+v, want %+v", tc.name, tc.params, got, tc.want)
		}
	}
}

// TestVolumeAttributes: a filesystem volume's PV records its root
// directory mode, the default included; a block volume's records nothing.
func TestVolumeAttributes(t *testing.T) {
	p, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.VolumeAttributes(volume.Filesystem), map[string]string{"rootDirMode": "0777"}; !maps.Equal(got, want) {
		t.Errorf("filesystem attributes = %v, want %v", got, want)
	}
	if got := p.VolumeAttributes(volume.Block); got != nil {
		t.Errorf("block attributes = %v, want none", got)
	}
	if n, m := len(p.CreateOptions(volume.Filesystem)), len(p.CreateOptions(volume.Block)); n != m+1 {
		t.Errorf("%d filesystem and %d block create options; want the root directory mode only for the first", n, m)
	}
}

// TestParseSnapshot: a VolumeSnapshotClass may ask only for an
// over-commit ratio; a StorageClass's other parameters are refused there,
// as is any unknown one.
func TestParseSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		want    SnapshotParams
		wantErr string // substring; empty: valid
	}{
		{name: "none", want: SnapshotParams{Overcommit: volume.NoOvercommit}},
		{name: "ratio", params: map[string]string{"overcommit": "3"}, want: SnapshotParams{Overcommit: 3}},
		{name: "a volume's parameter", params: map[string]string{"rootDirMode": "0750"},
			wantErr: "unknown parameters rootDirMode; storage.plinth.dev supports only overcommit"},
		{name: "bad ratio", params: map[string]string{"overcommit": "101"}, wantErr: "parameter overcommit: "},
	} {
		got, err := ParseSnapshot(tc.params)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: ParseSnapshot(%v) = %v", tc.name, tc.params, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: ParseSnapshot(%v) = %+v, %v; want an error containing %q", tc.name, tc.params, got, err, tc.wantErr)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("%s: ParseSnapshot(%v) = %+v, want %+v", tc.name, tc.params, got, tc.want)
		}
	}
}
