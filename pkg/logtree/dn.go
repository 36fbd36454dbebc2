package logtree

import (
	"fmt"
	"strings"
)

// DN ("distinguished name") is the dotted path of a node in the log tree,
// e.g. "root.kubernetes.csi". The empty DN is the root of the tree; it holds
// no component of its own but reading it WithChildren returns everything.
type DN string

// Validate reports whether dn is a well-formed path: either empty, or
// non-empty parts separated by single dots, each part made of ASCII letters,
// digits, '-' and '_'. Restricting the alphabet keeps DNs safe to print on
// one line and to use as metric or file name fragments.
func (dn DN) Validate() error {
	if dn == "" {
		return nil
	}
	for i, part := range strings.Split(string(dn), ".") {
		if part == "" {
			return fmt.Errorf("invalid DN %q: part %d is empty", string(dn), i)
		}
		for _, r := range part {
			ok := (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' || r == '_'
			if !ok {
				return fmt.Errorf("invalid DN %q: part %q contains %q (allowed: letters, digits, '-', '_')", string(dn), part, r)
			}
		}
	}
	return nil
}

// Child returns the DN of the child called name below dn.
func (dn DN) Child(name string) DN {
	if dn == "" {
		return DN(name)
	}
	return dn + "." + DN(name)
}

// Parent returns the DN one level up; the parent of a top-level DN (and of
// the root) is the root "".
func (dn DN) Parent() DN {
	i := strings.LastIndexByte(string(dn), '.')
	if i < 0 {
		return ""
	}
	return dn[:i]
}

// IsWithin reports whether dn is ancestor itself or lies below it. Every DN
// is within the root "".
func (dn DN) IsWithin(ancestor DN) bool {
	if ancestor == "" || dn == ancestor {
		return true
	}
	return strings.HasPrefix(string(dn), string(ancestor)+".")
}
