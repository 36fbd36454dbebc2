package storagesuite

import (
	"encoding/json"
	"testing"
)

// TestSummarize feeds summarize a report in ginkgo's JSON shape (the
// fields as ginkgo 2.21 writes them) with one spec of each kind.
func TestSummarize(t *testing.T) {
	const data = `[{"SpecReports": [
	 {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
	 {"ContainerHierarchyTexts": ["External Storage", "volumes"], "LeafNodeType": "It", "LeafNodeText": "should store data", "State": "passed"},
	 {"ContainerHierarchyTexts": ["External Storage", "snapshot"], "LeafNodeType": "It", "LeafNodeText": "filtered out", "State": "skipped"},
	 {"ContainerHierarchyTexts": ["External Storage", "provisioning"], "LeafNodeType": "It", "LeafNodeText": "clone", "State": "skipped",
	  "Failure": {"Message": "Driver \"storage.plinth.dev\" does not support cloning - skipping"}},
	 {"ContainerHierarchyTexts": ["External Storage", "volumes"], "LeafNodeType": "It", "LeafNodeText": "exec", "State": "timedout",
	  "Failure": {"Message": "Timed out after 300s"}},
	 {"LeafNodeType": "SynchronizedAfterSuite", "State": "failed", "Failure": {"Message": "namespace left"}}
	]}]`
	var r report
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatal(err)
	}
	s := r.summarize()
	if s.selected != 3 || len(s.passed) != 1 || len(s.skipped) != 1 || len(s.failed) != 2 {
		t.Fatalf("selected %d, passed %d, skipped %d, failed %d; want 3, 1, 1, 2 (a filtered spec is not selected, a failed suite node counts as failed)",
			s.selected, len(s.passed), len(s.skipped), len(s.failed))
	}
	if s.failed[0].name != "External Storage volumes exec" || s.failed[1].name != "[SynchronizedAfterSuite] " {
		t.Errorf("failed = %+v", s.failed)
	}
	if why := allowedSkip(s.skipped[0].message); why == "" {
		t.Errorf("the clone skip is not allowed; it names a capability Plinth lacks")
	}
	if why := allowedSkip("Driver \"storage.plinth.dev\" does not support block volume mode - skipping"); why != "" {
		t.Errorf("a block-mode skip is allowed (%s), but Plinth has block volumes", why)
	}
}
