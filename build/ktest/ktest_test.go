package ktest

import "testing"

func TestResultLine(t *testing.T) {
	for _, tc := range []struct {
		line  string
		code  int
		found bool
	}{
		{ResultLine("n0nce", 0), 0, true},
		{"[  5.1] " + ResultLine("n0nce", 3) + "\r", 3, true},
		// A test printing a result line cannot fake one: it does not
		// know the nonce.
		{ResultLine("other", 0), 0, false},
		{"KTEST-RESULT n0nce exit=", 0, false},
		{"ok  \tsome/pkg", 0, false},
	} {
		code, ok := ParseResult(tc.line, "n0nce")
		if ok != tc.found || code != tc.code {
			t.Errorf("ParseResult(%q) = %d, %v; want %d, %v", tc.line, code, ok, tc.code, tc.found)
		}
	}
}

func TestPackageLine(t *testing.T) {
	name, code, ok := ParsePackage("[  3.2] "+PackageLine("n0nce", "pkg_loop.test", 2), "n0nce")
	if !ok || name != "pkg_loop.test" || code != 2 {
		t.Errorf("ParsePackage = %q, %d, %v; want pkg_loop.test, 2, true", name, code, ok)
	}
	if _, _, ok := ParsePackage(PackageLine("other", "x.test", 0), "n0nce"); ok {
		t.Error("ParsePackage accepted a line with another nonce")
	}
}
