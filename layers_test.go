// Package plinth_test keeps the repository's layers pointing one way: the
// code that ships never depends on the code that tests, builds or measures
// it (docs/design.md, Layers). Tests may import anything: a package's
// _test.go files are not part of what it ships, so only non-test imports
// are checked.
package plinth_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "source.plinth.dev/"

// layers are the rules: no package of trees (go list patterns, with their
// dependencies) imports a package under one of forbidden.
var layers = []struct {
	name      string
	trees     []string
	forbidden []string
}{
	// node/ and pkg/ are plinth-node and what it links: nothing of the
	// tests, the build tooling or the benchmarks goes into the binary.
	{"node and pkg import nothing under test, build or bench", []string{"./node/...", "./pkg/..."}, []string{"test", "build", "bench"}},
	// build/ makes what ships (the node image, the container image):
	// nothing of the tests or benchmarks goes into it either.
	{"build imports nothing under test or bench", []string{"./build/..."}, []string{"test", "bench"}},
}

func TestImportsRunOneWay(t *testing.T) {
	if os.Getenv("TEST_SRCDIR") != "" {
		t.Skip("needs the go command in the checkout; runs in make test-unit")
	}
	for _, l := range layers {
		t.Run(l.name, func(t *testing.T) {
			for _, e := range forbiddenImports(t, l.trees, l.forbidden) {
				t.Error(e)
			}
		})
	}
}

// forbiddenImports lists "a imports b" for every import b under forbidden
// by a package a of trees or their dependencies that is not itself under
// forbidden. Every chain from trees into a forbidden tree has such a first
// step, so none goes unreported.
func forbiddenImports(t *testing.T, trees, forbidden []string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, trees...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	under := func(pkg string) bool {
		for _, f := range forbidden {
			if pkg == module+f || strings.HasPrefix(pkg, module+f+"/") {
				return true
			}
		}
		return false
	}
	var found []string
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || under(fields[0]) {
			continue
		}
		for _, imp := range fields[1:] {
			if under(imp) {
				found = append(found, fields[0]+" imports "+imp)
			}
		}
	}
	return found
}
