package suite

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
	  "Failure": {"Message": "Driver \"storage.plinth.dev\" does not support cloning - skipping\nmore"}},
	 {"ContainerHierarchyTexts": ["External Storage", "volumes"], "LeafNodeType": "It", "LeafNodeText": "exec", "State": "timedout",
	  "Failure": {"Message": "Timed out after 300s"}},
	 {"LeafNodeType": "SynchronizedAfterSuite", "State": "failed", "Failure": {"Message": "namespace left"}}
	]}]`
	var r report
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatal(err)
	}
	s := r.summarize()
	if s.Selected != 3 || len(s.Passed) != 1 || len(s.Skipped) != 1 || len(s.Failed) != 2 {
		t.Fatalf("selected %d, passed %d, skipped %d, failed %d; want 3, 1, 1, 2 (a filtered spec is not selected, a failed suite node counts as failed)",
			s.Selected, len(s.Passed), len(s.Skipped), len(s.Failed))
	}
	if s.Failed[0].Name != "External Storage volumes exec" || s.Failed[1].Name != "[SynchronizedAfterSuite] " {
		t.Errorf("failed = %+v", s.Failed)
	}
	if got, want := s.SkipReasons[`Driver "storage.plinth.dev" does not support cloning - skipping`], 1; got != want {
		t.Errorf("skip reasons %v: want the first line of the message counted once", s.SkipReasons)
	}
}
