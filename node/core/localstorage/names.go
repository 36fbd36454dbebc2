package localstorage

import (
	"errors"
	"fmt"
	"strings"

	"source.plinth.dev/pkg/dnsname"
)

// ErrInvalidName is matched (errors.Is) by every name validation error, so
// callers can map them to one response (for CSI: codes.InvalidArgument)
// without parsing messages.
var ErrInvalidName = errors.New("invalid name")

// NameError says which name was refused, as what, and why.
type NameError struct {
	// Kind is what the name was meant to be: "volume ID", "driver name", "file name".
	Kind string
	// Name is the refused name, unchanged.
	Name string
	// Reason is the rule it broke, in words a user can act on.
	Reason string
}

func (e *NameError) Error() string {
	shown := e.Name
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, shown, e.Reason)
}

func (e *NameError) Unwrap() error { return ErrInvalidName }

// Limits of names entering the tree.
const (
	// MaxVolumeIDLength keeps volume IDs valid as DNS labels, and so as
	// Kubernetes object names and label values ("pvc-" + a UUID is 40).
	MaxVolumeIDLength = dnsname.MaxLabelLength
	// MaxDriverNameLength is the CSI spec's limit for plugin names.
	MaxDriverNameLength = 63
	// MaxFileNameLength is NAME_MAX on Linux filesystems: no path
	// component may be longer.
	MaxFileNameLength = 255
	// MaxPathLength is PATH_MAX on Linux, counting the terminating NUL:
	// the kernel refuses a longer path with ENAMETOOLONG.
	MaxPathLength = 4096
)

// ValidateName checks a name for a file or directory inside a directory of
// the tree: not empty, at most 255 bytes, no "/" and no NUL byte, and not
// starting with "." (which also rules out "." and ".."). Dot names are
// reserved for the tree's own temporary files, so a record can never
// collide with one and a listing can tell leftovers from records.
func ValidateName(name string) error {
	bad := func(reason string) error { return &NameError{Kind: "file name", Name: name, Reason: reason} }
	switch {
	case name == "":
		return bad("it is empty")
	case len(name) > MaxFileNameLength:
		return bad(fmt.Sprintf("it is %d bytes long, more than %d", len(name), MaxFileNameLength))
	case strings.IndexByte(name, 0) >= 0:
		return bad("it contains a NUL byte")
	case strings.Contains(name, "/"):
		return bad(`it contains "/"`)
	case name == "." || name == "..":
		return bad("it names a directory itself or its parent")
	case name[0] == '.':
		return bad(`it starts with "."; such names are reserved for temporary files`)
	}
	return nil
}

// ValidateVolumeID checks a volume ID: 1 to 63 characters of lowercase
// letters, digits and "-", starting and ending with a letter or digit (a DNS
// label, like "pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10"). The rule is strict
// on purpose: an ID becomes a directory name, a file name (with ".img"), a
// CSI volume handle and part of log lines, and this alphabet is safe in all
// of them. In particular it rules out "..", "/", NUL and ".", so an ID can
// never name anything outside the volumes directory or collide with a block
// image's suffix.
func ValidateVolumeID(id string) error {
	if err := dnsname.CheckLabel(id); err != nil {
		return &NameError{Kind: "volume ID", Name: id, Reason: err.Error()}
	}
	return nil
}

// ValidateSnapshotID checks a snapshot ID by the same rule as volume IDs
// ("snapshot-" + a UUID is 45 characters), for the same reasons: it
// becomes a directory name, a CSI snapshot handle and part of log lines.
func ValidateSnapshotID(id string) error {
	if err := dnsname.CheckLabel(id); err != nil {
		return &NameError{Kind: "snapshot ID", Name: id, Reason: err.Error()}
	}
	return nil
}

// ValidateDriverName checks a CSI driver name as the CSI spec defines it: at
// most 63 characters, domain-name notation (letters, digits, "-" and "."),
// starting and ending with a letter or digit. Driver names become directory
// and socket names in the kubelet's plugin directories.
func ValidateDriverName(name string) error {
	if err := dnsname.CheckDomain(name, MaxDriverNameLength); err != nil {
		return &NameError{Kind: "driver name", Name: name, Reason: err.Error()}
	}
	return nil
}
