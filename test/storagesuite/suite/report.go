package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// report is the part of ginkgo's JSON report (--json-report, one entry per
// suite) that a run reads.
type report []struct {
	SpecReports []specReport
}

type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	// State is passed, skipped, pending, failed, aborted, panicked,
	// interrupted or timedout.
	State   string
	Failure struct{ Message string }
}

func readReport(path string) (report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading ginkgo report: %w", err)
	}
	var r report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding ginkgo report %s: %w", path, err)
	}
	return r, nil
}

// Outcome is one spec's: its full name and, for a failure or a skip, the
// message.
type Outcome struct{ Name, Message string }

// Summary sorts the specs of a run.
type Summary struct {
	// Selected counts the specs that focus and skip let through.
	Selected                int
	Passed, Failed, Skipped []Outcome
	// SkipReasons counts the skipped specs by their reason.
	SkipReasons map[string]int
}

// summarize sorts the specs of the run. Specs the focus and skip patterns
// filtered out are reported as skipped without a message and are not
// counted; a spec that skips itself (a capability the driver lacks) says
// why. Failures of suite-level nodes (BeforeSuite, AfterSuite) count as
// failed specs.
func (r report) summarize() Summary {
	s := Summary{SkipReasons: map[string]int{}}
	for _, suite := range r {
		for _, sp := range suite.SpecReports {
			o := Outcome{Name: strings.TrimSpace(strings.Join(append(sp.ContainerHierarchyTexts, sp.LeafNodeText), " ")), Message: sp.Failure.Message}
			if sp.LeafNodeType != "It" {
				if sp.State != "passed" && sp.State != "skipped" {
					o.Name = "[" + sp.LeafNodeType + "] " + o.Name
					s.Failed = append(s.Failed, o)
				}
				continue
			}
			switch sp.State {
			case "passed":
				s.Selected++
				s.Passed = append(s.Passed, o)
			case "skipped", "pending":
				if sp.Failure.Message == "" {
					continue // filtered out
				}
				s.Selected++
				s.Skipped = append(s.Skipped, o)
				s.SkipReasons[skipReason(sp.Failure.Message)]++
			default:
				s.Selected++
				s.Failed = append(s.Failed, o)
			}
		}
	}
	return s
}

// skipReason is a skip message without the parts that vary between specs
// (the test pattern's volume type, fs type).
func skipReason(msg string) string {
	return strings.TrimSpace(strings.SplitN(msg, "\n", 2)[0])
}
