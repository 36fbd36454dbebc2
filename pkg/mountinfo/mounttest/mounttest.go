// Package mounttest holds the mount-table checks that tests of several
// packages make: how many mounts sit at a path, and whether a test left
// anything of its directory mounted. They read the calling process's table
// through package mountinfo, so escaped paths are compared decoded, and
// they fail the test when the table cannot be read rather than report an
// empty one.
package mounttest

import (
	"strings"
	"testing"

	"source.plinth.dev/pkg/mountinfo"
)

// Count returns how many mounts are stacked at path.
func Count(t testing.TB, path string) int {
	t.Helper()
	return len(mountinfo.At(read(t), path))
}

// Mentions returns how often s occurs in the mount table: in any field of
// any mount (mount point, a bind mount's root, a source, an option naming
// a path), paths decoded. A test that cleaned up after itself finds its
// directory mentioned nowhere, wherever a leftover mount would name it.
func Mentions(t testing.TB, s string) int {
	t.Helper()
	n := 0
	for _, m := range read(t) {
		for _, f := range []string{m.Root, m.MountPoint, m.Options, strings.Join(m.Optional, " "), m.FSType, m.Source, m.SuperOptions} {
			n += strings.Count(f, s)
		}
	}
	return n
}

func read(t testing.TB) []mountinfo.Mount {
	t.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	return mounts
}
