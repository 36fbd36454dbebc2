package noderemoval

// Suspects: the nodes that may have been removed, and what the actor does
// to find and to clear them.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/kubernetes/internal/ownership"
)

// pageSize is the most PVs one list request returns. Pages bound each
// answer, and the memory it takes here, in a cluster of many volumes; 500
// is the page client-go's pager and kubectl use.
const pageSize = 500

// suspects are the nodes that may have been removed, each with the time
// its Node was first seen missing (zero: not looked at yet). The CSINode
// informer adds to them while the looks read and drop them, hence the lock.
type suspects struct {
	self  string // never a suspect: this node is alive, Node object or not
	mu    sync.Mutex
	since map[string]time.Time
}

func newSuspects(self string) *suspects {
	return &suspects{self: self, since: map[string]time.Time{}}
}

// add makes node a suspect, keeping its time if it is one already.
func (s *suspects) add(node string) {
	if node == "" || node == s.self {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.since[node]; !ok {
		s.since[node] = time.Time{}
	}
}

// csiNodeDeleted is the CSINode informer's DeleteFunc. The kubelet makes
// its node's CSINode with an owner reference to the Node, so the garbage
// collector deletes it when the Node is deleted: the node may be gone.
func (s *suspects) csiNodeDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if n, ok := t.Obj.(*storagev1.CSINode); ok {
			s.add(n.Name)
		} else {
			s.add(t.Key) // a cluster-scoped object's key is its name
		}
		return
	}
	if n, ok := obj.(*storagev1.CSINode); ok {
		s.add(n.Name)
	}
}

// names are the suspects, sorted.
func (s *suspects) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.since))
	for n := range s.since {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// missing records that node's Node is missing at now, unless it was seen
// missing before, and returns since when, and whether it was.
func (s *suspects) missing(node string, now time.Time) (since time.Time, before bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.since[node]; !t.IsZero() {
		return t, true
	}
	s.since[node] = now
	return now, false
}

func (s *suspects) drop(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, node)
}

func (s *suspects) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.since)
}

// discover suspects the nodes that Plinth PVs name and that have no
// CSINode: nodes removed while no plinth-node watched (all were down), or
// before this node became the actor. It lists the Plinth PVs once, in
// pages, keeping only node names; the actor calls it when it becomes the
// actor, never at every look.
func (s *sweep) discover(ctx context.Context) error {
	s.log.Infof("this node acts for removed nodes now: looking once at every Plinth PV for nodes removed while it did not")
	named := map[string]bool{}
	err := s.listPVs(ctx, ownership.LabelNode, func(pv *corev1.PersistentVolume) {
		named[nodeOf(pv)] = true
	})
	if err != nil {
		return fmt.Errorf("listing Plinth PVs: %w", err)
	}
	delete(named, "")
	for node := range named {
		if _, err := s.csiNodes.Get(node); apierrors.IsNotFound(err) {
			s.suspects.add(node)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// nodeOf is the name of the node a PV of ours lives on: its node label, or
// where that is a hash of a long name (see ownership.NodeLabelValue), the
// full name the PV carries (ownership.AnnNodeName) if it hashes to the
// label; "" when neither tells. (A long name is never a hostname label,
// which is a label value too, so the node affinity cannot tell it.) A
// long-named node's PV made by a Plinth that wrote no name is found only
// when its CSINode's deletion is seen, or once the admission server has
// named its node, which it does only while the Node exists.
func nodeOf(pv *corev1.PersistentVolume) string {
	label := pv.Labels[ownership.LabelNode]
	if name, ok := ownership.NodeNameOfLabel(label); ok {
		return name
	}
	if name := pv.Annotations[ownership.AnnNodeName]; label != "" && ownership.NodeLabelValue(name) == label {
		return name
	}
	return ""
}

// look checks suspect node at now, and settles its volumes once its Node
// has been missing for the grace period. It says whether the suspect is
// cleared: its Node is there, or none of its volumes needs anything more.
func (s *sweep) look(ctx context.Context, node string, now time.Time) (cleared bool, err error) {
	_, err = s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("looking up node %s: %w", node, err)
	}
	since, before := s.suspects.missing(node, now)
	if !before {
		s.log.Infof("node %s has no Node object; its Plinth volumes, if any, count as a removed node's after %s", node, s.GracePeriod)
	}
	if now.Sub(since) < s.GracePeriod {
		return false, nil
	}
	var vols []*corev1.PersistentVolume
	selector := labels.SelectorFromSet(labels.Set{ownership.LabelNode: ownership.NodeLabelValue(node)}).String()
	if err := s.listPVs(ctx, selector, func(pv *corev1.PersistentVolume) { vols = append(vols, pv) }); err != nil {
		return false, fmt.Errorf("listing the PVs of node %s: %w", node, err)
	}
	return !s.settle(ctx, node, vols), nil
}

// listPVs calls each for every PV of our driver that selector selects,
// reading them a page at a time.
func (s *sweep) listPVs(ctx context.Context, selector string, each func(*corev1.PersistentVolume)) error {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: pageSize}
	for {
		page, err := s.Client.CoreV1().PersistentVolumes().List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range page.Items {
			if pv := &page.Items[i]; pv.Spec.CSI != nil && pv.Spec.CSI.Driver == s.Driver {
				each(pv)
			}
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}
