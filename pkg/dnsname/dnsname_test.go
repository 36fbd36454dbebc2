package dnsname

import (
	"regexp"
	"strings"
	"testing"
)

func TestCheckLabel(t *testing.T) {
	for _, c := range []struct {
		s      string
		reason string // "" means valid
	}{
		{"pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10", ""},
		{"a", ""},
		{"0", ""},
		{"datadir", ""},
		{strings.Repeat("a", 63), ""},
		{"", "it is empty"},
		{strings.Repeat("a", 64), "it is 64 characters long, more than 63"},
		{"..", `it contains ".."`},
		{"a/b", `it contains "/"`},
		{"a\x00b", "it contains a NUL byte"},
		{".", `character '.' at offset 0 is not allowed (only lowercase letters, digits and "-")`},
		{"Upper", `character 'U' at offset 0`},
		{"a_b", `character '_' at offset 1`},
		{"ä", "offset 0"},
		{"-lead", "it must start and end with a letter or digit"},
		{"trail-", "it must start and end with a letter or digit"},
	} {
		err := CheckLabel(c.s)
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("CheckLabel(%q) = %v, want valid", c.s, err)
		case c.reason != "" && err == nil:
			t.Errorf("CheckLabel(%q) accepted, want %q", c.s, c.reason)
		case c.reason != "" && !strings.Contains(err.Error(), c.reason):
			t.Errorf("CheckLabel(%q) = %v, want reason %q", c.s, err, c.reason)
		}
	}
}

func TestCheckDomain(t *testing.T) {
	for s, ok := range map[string]bool{
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
		if err := CheckDomain(s, 63); (err == nil) != ok {
			t.Errorf("CheckDomain(%q, 63) = %v, want ok=%v", s, err, ok)
		}
	}
	if err := CheckDomain("a.b", 2); err == nil || !strings.Contains(err.Error(), "more than 2") {
		t.Errorf("CheckDomain over the given limit = %v", err)
	}
}

// label is RFC 1123's DNS label as a regular expression, the form the
// supervisor and the node config checked runnable names with before they
// used CheckLabel.
var label = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// FuzzCheckLabel checks that CheckLabel accepts exactly the DNS labels.
func FuzzCheckLabel(f *testing.F) {
	for _, s := range []string{"pvc-1", "", "..", "a/b", "\x00", "a.b", "-a", "a-", "A", strings.Repeat("z", 63), strings.Repeat("z", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := CheckLabel(s) == nil, label.MatchString(s); got != want {
			t.Fatalf("CheckLabel(%q) accepts=%v, DNS label=%v", s, got, want)
		}
	})
}
