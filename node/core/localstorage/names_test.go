package localstorage

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateVolumeID(t *testing.T) {
	for _, c := range []struct {
		id     string
		reason string // "" means valid
	}{
		{"pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10", ""},
		{"a", ""},
		{"0", ""},
		{"vol-1", ""},
		{strings.Repeat("a", 63), ""},
		{"", "empty"},
		{strings.Repeat("a", 64), "64 characters long, more than 63"},
		{strings.Repeat("a", 200), "200 characters long"},
		{"..", `contains ".."`},
		{"a/b", `contains "/"`},
		{"/", `contains "/"`},
		{"../etc", `contains "/"`},
		{"a\x00b", "NUL byte"},
		{"\x00", "NUL byte"},
		{".", `character '.' at offset 0`},
		{"a.img", `character '.' at offset 1`},
		{"PVC-1", `character 'P' at offset 0`},
		{"a b", `character ' ' at offset 1`},
		{"-a", "start and end with a letter or digit"},
		{"a-", "start and end with a letter or digit"},
		{"ä", "offset 0"},
	} {
		err := ValidateVolumeID(c.id)
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("ValidateVolumeID(%q) = %v, want valid", c.id, err)
		case c.reason != "" && err == nil:
			t.Errorf("ValidateVolumeID(%q) accepted, want %q", c.id, c.reason)
		case c.reason != "" && !strings.Contains(err.Error(), c.reason):
			t.Errorf("ValidateVolumeID(%q) = %v, want reason %q", c.id, err, c.reason)
		case c.reason != "" && !errors.Is(err, ErrInvalidName):
			t.Errorf("ValidateVolumeID(%q) = %v does not match ErrInvalidName", c.id, err)
		}
	}
}

func TestValidateDriverName(t *testing.T) {
	for name, ok := range map[string]bool{
		"storage.plinth.dev":     true,
		"CSI.Example-1":          true,
		"":                       false,
		"a..b":                   false,
		".a":                     false,
		"a.":                     false,
		"a/b":                    false,
		"a_b":                    false,
		strings.Repeat("d", 63):  true,
		strings.Repeat("d", 64):  false,
		"storage.plinth.dev\x00": false,
	} {
		if err := ValidateDriverName(name); (err == nil) != ok {
			t.Errorf("ValidateDriverName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, c := range []struct {
		name, reason string
	}{
		{"record", ""},
		{"Mixed_Case.json", ""},
		{strings.Repeat("n", 255), ""},
		{"", "empty"},
		{strings.Repeat("n", 256), "256 bytes long"},
		{".", "directory itself or its parent"},
		{"..", "directory itself or its parent"},
		{".tmp-x", "reserved for temporary files"},
		{"a/b", `contains "/"`},
		{"a\x00", "NUL byte"},
	} {
		err := ValidateName(c.name)
		if (err == nil) != (c.reason == "") || (err != nil && !strings.Contains(err.Error(), c.reason)) {
			t.Errorf("ValidateName(%q) = %v, want reason %q", c.name, err, c.reason)
		}
	}
}

func TestNameErrorTruncatesLongNames(t *testing.T) {
	err := ValidateVolumeID(strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 200 {
		t.Errorf("error for a 10000-byte ID is %d bytes: %v", len(err.Error()), err)
	}
	var ne *NameError
	if !errors.As(err, &ne) || len(ne.Name) != 10000 || ne.Kind != "volume ID" {
		t.Errorf("NameError does not carry the full name and kind: %#v", ne)
	}
}

// FuzzValidateVolumeID checks the property the rest of the node relies on:
// an accepted ID is one path element that stays inside its directory.
func FuzzValidateVolumeID(f *testing.F) {
	for _, s := range []string{"pvc-1", "..", "a/b", "\x00", "a.img", strings.Repeat("z", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateVolumeID(id) != nil {
			return
		}
		if id == "" || len(id) > MaxVolumeIDLength || strings.ContainsAny(id, "/.\x00") {
			t.Fatalf("accepted unsafe ID %q", id)
		}
		var v VolumesDirectory
		if err := Place(&v, "/d/volumes"); err != nil {
			t.Fatal(err)
		}
		fsv, err := v.Filesystem(id)
		if err != nil || !v.Contains(fsv.FullPath()) || fsv.FullPath() == v.FullPath() {
			t.Fatalf("ID %q escapes: %q, %v", id, fsv.FullPath(), err)
		}
		e := classifyVolume(id+blockSuffix, 0)
		if e.ID != "" && e.ID != id {
			t.Fatalf("block name %q parses back as %q", id+blockSuffix, e.ID)
		}
	})
}

// FuzzValidateName checks that a name ChildFile accepts names exactly one
// entry directly inside its directory, never a temporary file's name.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"record", "..", "a/b", ".tmp-x", "\x00", "a\\b", " "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		var d Directory
		if err := Place(&d, "/state"); err != nil {
			t.Fatal(err)
		}
		c, err := d.ChildFile(name)
		if err != nil {
			return
		}
		if filepath.Dir(c.FullPath()) != "/state" || filepath.Base(c.FullPath()) != name || strings.HasPrefix(name, tempPrefix) {
			t.Fatalf("name %q maps to %q", name, c.FullPath())
		}
	})
}
