package storagesuite

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// report is the part of ginkgo's JSON report (--json-report, one entry per
// suite) that the test reads.
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

type outcome struct{ name, message string }

type summary struct {
	// selected counts the specs that focus and skip let through.
	selected                int
	passed, failed, skipped []outcome
	// skipReasons counts the skipped specs by their reason.
	skipReasons map[string]int
}

// summarize sorts the specs of the run. Specs the focus and skip patterns
// filtered out are reported as skipped without a message and are not
// counted; a spec that skips itself (a capability the driver lacks) says
// why. Failures of suite-level nodes (BeforeSuite, AfterSuite) count as
// failed specs.
func (r report) summarize() summary {
	s := summary{skipReasons: map[string]int{}}
	for _, suite := range r {
		for _, sp := range suite.SpecReports {
			o := outcome{name: strings.TrimSpace(strings.Join(append(sp.ContainerHierarchyTexts, sp.LeafNodeText), " ")), message: sp.Failure.Message}
			if sp.LeafNodeType != "It" {
				if sp.State != "passed" && sp.State != "skipped" {
					o.name = "[" + sp.LeafNodeType + "] " + o.name
					s.failed = append(s.failed, o)
				}
				continue
			}
			switch sp.State {
			case "passed":
				s.selected++
				s.passed = append(s.passed, o)
			case "skipped", "pending":
				if sp.Failure.Message == "" {
					continue // filtered out
				}
				s.selected++
				s.skipped = append(s.skipped, o)
				s.skipReasons[skipReason(sp.Failure.Message)]++
			default:
				s.selected++
				s.failed = append(s.failed, o)
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

// allowedSkips are the skips a run may have, each with the capability
// Plinth lacks that explains it. A skip matching none fails the test.
var allowedSkips = []struct {
	pattern *regexp.Regexp
	why     string
}{
	{regexp.MustCompile(`does not support cloning`), "no clones: a claim's data source is refused (pvcDataSource)"},
	{regexp.MustCompile(`does not support volume type "CSIInlineVolume"`), "no CSI ephemeral inline volumes: the CSIDriver lists the Persistent lifecycle only"},
	{regexp.MustCompile(`does not support volume type "InlineVolume"`), "in-tree inline volumes are not a CSI driver's; the suite defines none for an external driver"},
	{regexp.MustCompile(`does not support volume type "PreprovisionedPV"`), "no pre-provisioned PVs: a Plinth volume exists only through its provisioner, and the suite offers none for an external driver"},
	{regexp.MustCompile(`doesn't support ext[34]`), "no fsType: a filesystem volume is a directory on the node's XFS"},
	{regexp.MustCompile(`does not support volume limits`), "no attach limit: NodeGetInfo sets no max_volumes_per_node"},
	{regexp.MustCompile(`doesn't publish storage capacity`), "no CSIStorageCapacity objects"},
	{regexp.MustCompile(`^Block volumes do not support mount options`), "mount options do not apply to raw block volumes"},
	{regexp.MustCompile(`^raw block volumes cannot be read-only`), "Kubernetes has no read-only raw block ephemeral volume"},
	{regexp.MustCompile(`^skipping multiple PV mount test for block mode`), "the suite mounts two PVs of one handle for filesystems only"},
	{regexp.MustCompile(`^Suite "volumeLimits" does not support GenericEphemeralVolume`), "the suite's own pattern limit"},
	{regexp.MustCompile(`^Not enough topologies in cluster`), "the spec needs two nodes; the test cluster has one"},
	{regexp.MustCompile(`^VolumeBindingMode immediate is not compatible with a multi-topology environment|^Multiple generic ephemeral volumes with immediate binding`),
		"no Immediate binding: a volume is made on the node the scheduler picked (WaitForFirstConsumer), see skip in suite_test.go"},
}

// allowedSkip returns why a skip message is acceptable, or "".
func allowedSkip(msg string) string {
	for _, a := range allowedSkips {
		if a.pattern.MatchString(msg) {
			return a.why
		}
	}
	return ""
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
