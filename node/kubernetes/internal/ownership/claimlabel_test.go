package ownership

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestClaimLabel(t *testing.T) {
	long := strings.Repeat("n", 70)
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		want      string
		wantLabel bool
	}{
		{"placed", map[string]string{AnnStorageProvisioner: testDriver, AnnSelectedNode: testNode}, testNode, true},
		{"placed, beta annotation", map[string]string{AnnBetaStorageProvisioner: testDriver, AnnSelectedNode: testNode}, testNode, true},
		{"placed on a long name", map[string]string{AnnStorageProvisioner: testDriver, AnnSelectedNode: long}, NodeLabelValue(long), true},
		{"unplaced", map[string]string{AnnStorageProvisioner: testDriver}, LabelUnplaced, true},
		{"another driver's", map[string]string{AnnStorageProvisioner: "other.example.com", AnnSelectedNode: testNode}, "", false},
		{"no provisioner yet", map[string]string{AnnSelectedNode: testNode}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ClaimLabel(testClaim(func(c *corev1.PersistentVolumeClaim) { c.Annotations = tc.ann }), testDriver)
			if got != tc.want || ok != tc.wantLabel {
				t.Errorf("ClaimLabel = %q, %v; want %q, %v", got, ok, tc.want, tc.wantLabel)
			}
		})
	}
}

// TestClaimSelectorSelectsOwnOnly: the selector a node watches claims
// with matches exactly the label ClaimLabel gives its claims: not the
// unplaced ones (the scheduler's or the placer's), and no other node's,
// hashed names included.
func TestClaimSelectorSelectsOwnOnly(t *testing.T) {
	long := strings.Repeat("n", 70)
	for _, node := range []string{testNode, long} {
		sel, err := labels.Parse(ClaimSelector(node))
		if err != nil {
			t.Fatalf("ClaimSelector(%q) = %q: %v", node, ClaimSelector(node), err)
		}
		for value, want := range map[string]bool{
			NodeLabelValue(node):        true,
			LabelUnplaced:               false,
			NodeLabelValue("node-b"):    false,
			NodeLabelValue(long + "-b"): false,
			"":                          false,
		} {
			set := labels.Set{}
			if value != "" {
				set[LabelNode] = value
			}
			if got := sel.Matches(set); got != want {
				t.Errorf("node %.10s…: selector %q matches label %q: %v, want %v", node, sel, value, got, want)
			}
		}
	}
}
