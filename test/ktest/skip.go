package ktest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
)

// skipLine matches the line `go test -test.v` prints when a test, subtest
// or benchmark skips: "--- SKIP: TestX/sub (0.00s)", indented for
// subtests; benchmarks have no duration.
var skipLine = regexp.MustCompile(`^\s*--- SKIP: (\S+)`)

// runLine matches the line `go test -test.v` prints when a top-level test
// starts: "=== RUN   TestX" (subtests have a slash in the name).
var runLine = regexp.MustCompile(`^=== RUN\s+Test[^/\s]*$`)

// StartedTest reports whether a verbose test output line says a top-level
// test started.
func StartedTest(line string) bool { return runLine.MatchString(line) }

// Filtered reports whether args, the test binary arguments the user gave,
// choose the tests to run themselves: then a binary none of whose tests
// match ran nothing on purpose.
func Filtered(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "-test.run=") || strings.HasPrefix(a, "-run=") || a == "-test.run" || a == "-run"
	})
}

// SkippedTest returns the name of the test a verbose test output line
// reports as skipped.
func SkippedTest(line string) (name string, ok bool) {
	m := skipLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// declareSkip appends a test's name to the list of expected skips. One
// short O_APPEND write per name, so parallel tests do not interleave.
func declareSkip(file, name string) error {
	if file == "" {
		return fmt.Errorf("%s is not set: the VM's init did not say where expected skips go", envSkips)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(name + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readDeclaredSkips reads the names SkipExpected wrote to file; a missing
// file is an empty list.
func readDeclaredSkips(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// UnexpectedSkips returns the skipped tests that were not declared
// expected.
func UnexpectedSkips(skipped, declared []string) []string {
	var out []string
	for _, s := range skipped {
		if !slices.Contains(declared, s) {
			out = append(out, s)
		}
	}
	return out
}
