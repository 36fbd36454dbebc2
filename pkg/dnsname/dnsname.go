// Package dnsname checks names that must be DNS labels or written in
// domain-name notation, and says which rule a refused name breaks.
//
// Why the node keeps names to this alphabet: a volume ID becomes a directory
// name, a file name, a CSI volume handle and part of Kubernetes object
// names; a runnable's name becomes part of a log DN. Lowercase letters,
// digits and "-" are safe in all of these, and they can never spell "/",
// ".." or a NUL byte, so a checked name cannot point outside the directory
// it is joined to.
//
// The checks report the first broken rule in words a user can act on
// ("character 'P' at offset 0 is not allowed"), not "does not match".
// The returned error describes only the rule; callers wrap it with what the
// name was meant to be.
package dnsname

import (
	"errors"
	"fmt"
	"strings"
)

// MaxLabelLength is the longest DNS label (RFC 1123).
const MaxLabelLength = 63

// CheckLabel checks that s is a DNS label (RFC 1123): 1 to 63 lowercase
// letters, digits and "-", starting and ending with a letter or digit, like
// "pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10".
func CheckLabel(s string) error {
	return check(s, MaxLabelLength, false)
}

// CheckDomain checks that s is written in domain-name notation, the CSI
// spec's rule for plugin names: at most maxLen characters of letters (either
// case), digits, "-" and ".", starting and ending with a letter or digit,
// with no empty label ("..").
func CheckDomain(s string, maxLen int) error {
	return check(s, maxLen, true)
}

// check tests the rules in an order that names the most telling problem
// first: "contains '/'" helps more than the offset of the '/'.
func check(s string, maxLen int, domain bool) error {
	if s == "" {
		return errors.New("it is empty")
	}
	if len(s) > maxLen {
		return fmt.Errorf("it is %d characters long, more than %d", len(s), maxLen)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return errors.New("it contains a NUL byte")
	}
	if strings.Contains(s, "/") {
		return errors.New(`it contains "/"`)
	}
	if strings.Contains(s, "..") {
		return errors.New(`it contains ".."`)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case domain && (c >= 'A' && c <= 'Z' || c == '.'):
		default:
			allowed := "lowercase letters, digits and \"-\""
			if domain {
				allowed = "letters, digits, \"-\" and \".\""
			}
			return fmt.Errorf("character %q at offset %d is not allowed (only %s)", c, i, allowed)
		}
	}
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return errors.New("it must start and end with a letter or digit")
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
