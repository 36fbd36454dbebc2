package noderemoval

// Which plinth-node acts: one, so that the cluster gets one Event per
// claim, not one per node.

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// candidateCount is how many nodes may act: the lowest-named ones running
// the driver. A node that is powered off keeps its CSINode (only its own
// kubelet removes it), so the lowest names may be down, several at once
// (a rack losing power, a rolling reboot): ten tolerate nine of them down
// together. Fewer would leave removed nodes without an outcome more
// often; more would add Node reads: each candidate reads the Nodes of the
// candidates below it until one is Ready, so a look costs the cluster at
// most 45 GETs (9 when the lowest is Ready) whatever the number of nodes.
// If all ten are down, nobody acts until one returns: the outcome is late,
// nothing is lost.
const candidateCount = 10

// actorCandidates are the nodes that may act, lowest name first: the
// candidateCount lowest names among the nodes whose CSINode lists the
// driver, this node counted (its driver runs, whether or not its kubelet
// has registered it yet).
func (s *sweep) actorCandidates() ([]string, error) {
	all, err := s.csiNodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	names := []string{s.NodeName}
	for _, n := range all {
		if n.Name != s.NodeName && slices.ContainsFunc(n.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == s.Driver }) {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	return names[:min(len(names), candidateCount)], nil
}

// isActor says whether this node is the one that acts: the lowest-named
// candidate whose Node is Ready, itself counted as Ready. A node that is
// not a candidate reads nothing; a candidate reads the Nodes of the lower
// candidates, lowest first, until one is Ready.
func (s *sweep) isActor(ctx context.Context) (bool, error) {
	candidates, err := s.actorCandidates()
	if err != nil {
		return false, err
	}
	if !slices.Contains(candidates, s.NodeName) {
		return false, nil
	}
	for _, name := range candidates {
		if name == s.NodeName {
			return true, nil
		}
		node, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return false, fmt.Errorf("reading Node %s, which may act instead: %w", name, err)
		}
		if ready(node) {
			return false, nil
		}
	}
	return true, nil // not reached: this node is a candidate
}

// ready reports whether node's Ready condition is True.
func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
