package clusterobjects_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
)

// TestNodeEventsOwnOnly: a node agent writes Events only in its own name
// (their source host is its node) and only about claims, PVs and its own
// Node, so that it cannot speak for another node (a forged NodeRemoved)
// nor about anything else in the cluster. The Events the controllers'
// recorder writes pass. Each refusal comes from the events policy, not
// from RBAC, which allows every one of these calls; an administrator's
// Events are not the policy's to judge.
func TestNodeEventsOwnOnly(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	nodeA, nodeB := e.Node, e.Node+"-b"
	a := controllertest.NodeAgentClient(t, nodeA)
	claim := e.CreateClaim(controllertest.Claim{Name: "claim", Node: nodeA})

	claimRef := corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: e.NS, Name: claim.Name, UID: claim.UID}
	event := func(host string, about corev1.ObjectReference) *corev1.Event {
		// Events about cluster-scoped objects live in "default", as the
		// recorder writes them.
		ns := about.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "plinth-", Namespace: ns},
			InvolvedObject: about,
			Reason:         "Test",
			Message:        "from " + host,
			Type:           corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: names.DriverName, Host: host},
			Count:          1,
		}
	}
	write := func(ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
		return a.CoreV1().Events(ev.Namespace).Create(ctx, ev, opts)
	}
	dryRun := metav1.CreateOptions{DryRun: dry}
	allowed := func(what string, ev *corev1.Event) {
		t.Helper()
		if _, err := write(ev, dryRun); err != nil {
			t.Errorf("%s: refused: %v", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		by := "ValidatingAdmissionPolicy '" + clusterobjects.EventsPolicyName + "'"
		switch {
		case err == nil:
			t.Errorf("%s: allowed, want refused by %s", what, by)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), by):
			t.Errorf("%s: %v, want refused by %s", what, err, by)
		}
	}
	refusedEvent := func(what string, ev *corev1.Event) {
		t.Helper()
		_, err := write(ev, dryRun)
		refused(what, err)
	}

	allowed("an Event of its own about a claim", event(nodeA, claimRef))
	allowed("an Event of its own about a PV", event(nodeA, corev1.ObjectReference{Kind: "PersistentVolume", APIVersion: "v1", Name: "pvc-x"}))
	allowed("an Event of its own about its Node", event(nodeA, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeA}))
	refusedEvent("an Event in node B's name", event(nodeB, claimRef))
	refusedEvent("an Event in no node's name", event("", claimRef))
	refusedEvent("an Event about a Pod", event(nodeA, corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: e.NS, Name: "web"}))
	refusedEvent("an Event about node B's Node", event(nodeA, corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeB}))

	// An Event it wrote may be counted up (the recorder patches a
	// repeat), not moved into another node's name.
	mine, err := write(event(nodeA, claimRef), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string) error {
		_, err := a.CoreV1().Events(e.NS).Patch(ctx, mine.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: dry})
		return err
	}
	if err := patch(`{"count":2}`); err != nil {
		t.Errorf("counting up its own Event: refused: %v", err)
	}
	refused("moving its Event into node B's name", patch(`{"source":{"host":"`+nodeB+`"}}`))

	// The policy matches core/v1 Events only: the other way to write an
	// Event, events.k8s.io/v1, is closed to node agents by RBAC.
	_, err = a.EventsV1().Events(e.NS).Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: "plinth-", Namespace: e.NS},
		EventTime:           metav1.NowMicro(),
		Regarding:           claimRef,
		Reason:              "Test",
		Note:                "through events.k8s.io",
		Type:                corev1.EventTypeWarning,
		Action:              "Test",
		ReportingController: names.DriverName,
		ReportingInstance:   nodeB,
	}, dryRun)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot create resource") {
		t.Errorf("an events.k8s.io Event in node B's name: %v, want refused by RBAC", err)
	}

	// Negative control: the policy judges node agents only.
	if _, err := e.Client.CoreV1().Events(e.NS).Create(ctx, event(nodeB, claimRef), dryRun); err != nil {
		t.Errorf("an administrator's Event in node B's name: refused: %v", err)
	}

	// The recorder every controller uses passes, a repeat (a patch of
	// the count) included.
	recorder, stop := controller.NewRecorder(ctx, a, names.DriverName, nodeA)
	defer stop()
	for range 2 {
		recorder.Event(claim, corev1.EventTypeNormal, "RecorderTest", "written by the controllers' recorder")
	}
	selector := fields.Set{"reason": "RecorderTest", "involvedObject.uid": string(claim.UID)}.AsSelector().String()
	controllertest.Eventually(t, 30*time.Second, "the recorder's Event, counted twice", func() (bool, error) {
		evs, err := e.Client.CoreV1().Events(e.NS).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		return len(evs.Items) == 1 && evs.Items[0].Count == 2 && evs.Items[0].Source.Host == nodeA, nil
	})
}
