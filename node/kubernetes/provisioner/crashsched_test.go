package provisioner

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/ktest"
)

// placeHandedBack stands in for the scheduler, as the crash schedule does
// when it creates its claims placed on the node. While deletions lag behind
// the kills and the tight client budget, the node can run out of room and
// hand a claim back (handBack); a scheduler would place it again once the
// node's capacity shows room, and this places every such live claim again
// on each round of the settle. A claim handed back for another reason than
// room is a violation: nothing else in this workload may make the node
// give a claim up. So is any hand-back on the host, whose data directory
// (on the host's own filesystem) has room for every claim of the test:
// only the VM's small disk can run out.
func (r *crashRun) placeHandedBack(t *testing.T) (v []string) {
	t.Helper()
	ctx := context.Background()
	for _, pvc := range r.live {
		cur, err := r.client.CoreV1().PersistentVolumeClaims(r.e.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // check reports it
		} else if err != nil {
			return append(v, err.Error())
		}
		if cur.Annotations[ownership.AnnSelectedNode] != "" || cur.Spec.VolumeName != "" {
			continue
		}
		forRoom, unsaid := r.handedBackForRoom(t, cur.UID)
		if !forRoom {
			v = append(v, fmt.Sprintf("claim %s was handed back, and not for want of room", pvc.Name))
			continue
		}
		if !ktest.InVM() {
			v = append(v, fmt.Sprintf("claim %s was handed back for want of room on the host, whose data filesystem holds every claim of the test", pvc.Name))
			continue
		}
		err = placeClaim(r.client, r.e.NS, pvc.Name, r.e.Node, cur.ResourceVersion)
		switch {
		case apierrors.IsConflict(err):
		case err != nil:
			v = append(v, fmt.Sprintf("placing claim %s again: %v", pvc.Name, err))
		default:
			r.replaced[cur.UID]++
			if unsaid {
				r.unsaid[cur.UID] = true
			}
		}
	}
	return v
}

// handedBackForRoom reports whether the node said it handed the claim with
// uid back because its data filesystem had no room: in an Event, or in
// the log line handBack writes before its patch (a process killed right
// after the patch never sends the Event), and whether only the log did.
func (r *crashRun) handedBackForRoom(t *testing.T, uid types.UID) (forRoom, onlyLogged bool) {
	t.Helper()
	for _, ev := range r.e.Events(uid) {
		if ev.Type == corev1.EventTypeWarning && ev.Reason == ReasonProvisioningFailed &&
			strings.Contains(ev.Message, "not enough space for volume") && strings.Contains(ev.Message, "no longer placed on this node") {
			return true, false
		}
	}
	log, err := os.ReadFile(r.node.Log)
	if err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(`\] handing back claim \S+ \(uid ` + regexp.QuoteMeta(string(uid)) + `\): [^\n]*not enough space for volume`)
	return said.Match(log), true
}
