package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// sharedOf runs the shared informers of node, and an incarnation on
// them, and returns what its claim handler was given in e's namespace.
func sharedOf(t *testing.T, e *controllertest.Env, node string) *seen {
	t.Helper()
	s, _ := incarnation(t, withShared(t, e, node), e.NS)
	return s
}

// TestNodeHearsOnlyItsOwnClaims: with two nodes, each node's claim
// informer is given its own claims, and never an unplaced claim, a claim
// placed on the other node or one of another driver, while an informer
// that selects nothing (the control) is given them all; a claim the
// scheduler places on a node reaches that node's informer then.
func TestNodeHearsOnlyItsOwnClaims(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	a, b := e.Node, e.Node+"-b"
	heardA, heardB := sharedOf(t, e, a), sharedOf(t, e, b)

	// The control: an informer of every claim, as every node had before.
	all := informers.NewSharedInformerFactory(e.Client, 0)
	heardAll := &seen{ns: e.NS, names: map[string]int{}}
	if _, err := all.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    heardAll.add,
		UpdateFunc: func(_, o any) { heardAll.add(o) },
		DeleteFunc: heardAll.add,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	all.Start(ctx.Done())
	defer func() {
		cancel()
		all.Shutdown()
	}()

	e.CreateClaim(controllertest.Claim{Name: "on-a", Node: a})
	e.CreateClaim(controllertest.Claim{Name: "on-b", Node: b})
	unplaced := e.ClaimObject(controllertest.Claim{Name: "unplaced"})
	delete(unplaced.Annotations, ownership.AnnSelectedNode)
	// Another driver's claim, of its own class (or the PV controller
	// would make it Plinth's, its class's).
	otherClass := e.NS + "-disk"
	e.CreateClassFor("disk.example.com", otherClass, corev1.PersistentVolumeReclaimDelete, nil)
	other := e.ClaimObject(controllertest.Claim{Name: "other-driver", Node: a, Class: otherClass})
	other.Annotations[ownership.AnnStorageProvisioner] = "disk.example.com"
	for _, c := range []*corev1.PersistentVolumeClaim{unplaced, other} {
		if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Changes of each: the claims on a and b, and the other driver's, are
	// annotated; the unplaced one is placed on b, as the scheduler would.
	for name, ann := range map[string][2]string{
		"on-a": {"example.com/touched", "1"}, "on-b": {"example.com/touched", "1"},
		"other-driver": {"example.com/touched", "1"}, "unplaced": {ownership.AnnSelectedNode, b},
	} {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ann[0], ann[1])
		if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	controllertest.Eventually(t, 30*time.Second, "the control hearing every claim and change", func() (bool, error) {
		for _, n := range []string{"on-a", "on-b", "unplaced", "other-driver"} {
			if heardAll.of(n) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	controllertest.Eventually(t, 30*time.Second, "each node hearing its own claims", func() (bool, error) {
		// on-a, on-b: created and changed; unplaced: placed on b.
		return heardA.of("on-a") >= 2 && heardB.of("on-b") >= 2 && heardB.of("unplaced") >= 1, nil
	})
	// Give what should never come the time to come.
	time.Sleep(2 * time.Second)
	for _, c := range []struct {
		node  string
		heard *seen
		never []string
	}{{a, heardA, []string{"on-b", "other-driver", "unplaced"}}, {b, heardB, []string{"on-a", "other-driver"}}} {
		for _, name := range c.never {
			if n := c.heard.of(name); n != 0 {
				t.Errorf("node %s was given claim %s %d times; it is not its own", c.node, name, n)
			}
		}
	}
}
