package ownership

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// A claim of Plinth's carries LabelNode too, so that each node's claim
// informer selects its own claims on the API server and the claims of
// other nodes never reach it (a node's cost does not grow with the
// cluster). The value is derived from the claim's annotations alone
// (ClaimLabel), which is what lets one writer, the admission webhook's
// mutating path, keep it true in the same write that changes them, and
// lets the admission policy check a node's writes against it.
const (
	// LabelUnplaced is LabelNode's value on a claim of Plinth's that no
	// node was chosen for yet: one waiting for the scheduler or for the
	// placer (package placement), or one handed back. Node names are
	// lower case (DNS subdomains), so no node's label value can equal it.
	LabelUnplaced = "Unplaced"
)

// ClaimLabel is the value LabelNode must have on pvc: the selected node's
// label value (NodeLabelValue) when the claim asks driver for a volume and
// is placed, LabelUnplaced when it asks driver and is not; ok is false
// when the claim is not driver's and must carry no such label.
func ClaimLabel(pvc *corev1.PersistentVolumeClaim, driver string) (value string, ok bool) {
	if pvc == nil || ClaimProvisioner(pvc) != driver {
		return "", false
	}
	if node := pvc.Annotations[AnnSelectedNode]; node != "" {
		return NodeLabelValue(node), true
	}
	return LabelUnplaced, true
}

// ClaimSelector is the label selector of a node's claim informer: the
// claims placed on nodeName. Nothing else reaches the node, not even the
// unplaced claims: the scheduler or the placer chooses their node.
func ClaimSelector(nodeName string) string {
	return fmt.Sprintf("%s=%s", LabelNode, NodeLabelValue(nodeName))
}
