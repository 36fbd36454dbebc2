package admission

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

// placing is the review of user's update of a claim of class from
// selected-node before to after (each "" for none), on subresource sub.
func placing(t *testing.T, user authenticationv1.UserInfo, class, before, after, sub string) *admissionv1.AdmissionRequest {
	t.Helper()
	raw := func(node string) []byte {
		c := claim("c", "u-c", names.DriverName, node)
		if class != "" {
			c.Spec.StorageClassName = &class
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return &admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"},
		Operation: admissionv1.Update, SubResource: sub, UserInfo: user,
		Object: runtime.RawExtension{Raw: raw(after)}, OldObject: runtime.RawExtension{Raw: raw(before)},
	}
}

func TestAdmitPlacement(t *testing.T) {
	mode := func(m storagev1.VolumeBindingMode) *storagev1.VolumeBindingMode { return &m }
	hosts := func(h ...string) []corev1.TopologySelectorTerm {
		return []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: names.TopologyKeyHostname, Values: h}}}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{names.TopologyKeyHostname: "host-a"}}}
	classes := []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "now"}, Provisioner: names.DriverName, VolumeBindingMode: mode(storagev1.VolumeBindingImmediate)},
		{ObjectMeta: metav1.ObjectMeta{Name: "unset"}, Provisioner: names.DriverName},
		{ObjectMeta: metav1.ObjectMeta{Name: "waiting"}, Provisioner: names.DriverName, VolumeBindingMode: mode(storagev1.VolumeBindingWaitForFirstConsumer)},
		{ObjectMeta: metav1.ObjectMeta{Name: "host-a"}, Provisioner: names.DriverName, AllowedTopologies: hosts("host-b", "host-a")},
		{ObjectMeta: metav1.ObjectMeta{Name: "host-b"}, Provisioner: names.DriverName, AllowedTopologies: hosts("host-b")},
		{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.example.com"},
	}
	objects := []runtime.Object{node}
	for _, c := range classes {
		objects = append(objects, c)
	}
	w, err := New(fake.NewClientset(objects...), logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	agent := func(n string) authenticationv1.UserInfo {
		return authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser(n), Groups: []string{clusterobjects.NodeAgentGroup}}
	}
	daemonSetNoNode := authenticationv1.UserInfo{Username: clusterobjects.DaemonSetUser()}
	admin := authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
	for _, tc := range []struct {
		what          string
		user          authenticationv1.UserInfo
		class         string
		before, after string
		sub           string
		refuse        string // "" allowed; else a part of the refusal
	}{
		{"an Immediate class", agent("a"), "now", "", "a", "", ""},
		{"a class whose mode is unset (Immediate)", agent("a"), "unset", "", "a", "", ""},
		{"an Immediate class, by a node without a Node", agent("b"), "now", "", "b", "", ""},
		{"a class whose topology admits it", agent("a"), "host-a", "", "a", "", ""},
		{"a WaitForFirstConsumer class (a claim handed back)", agent("a"), "waiting", "", "a", "",
			`is of StorageClass "waiting", which binds when its first consumer is scheduled`},
		{"a class whose topology admits another host", agent("a"), "host-b", "", "a", "",
			`is of StorageClass "host-b", whose allowedTopologies do not admit the node's labels`},
		{"a class with topology, by a node without a Node", agent("b"), "host-b", "", "b", "",
			`whose allowedTopologies admit no node without a Node object`},
		{"another driver's class", agent("a"), "disk", "", "a", "", `is of StorageClass "disk", which belongs to "disk.example.com"`},
		{"a class that does not exist", agent("a"), "gone", "", "a", "", `is of StorageClass "gone", which does not exist`},
		{"no class", agent("a"), "", "", "a", "", "names no StorageClass"},
		{"on another node", agent("a"), "now", "", "b", "", "would be placed on node b"},
		{"a DaemonSet token bound to no node", daemonSetNoNode, "now", "", "a", "", "names no node"},
		{"not a placement: a claim placed already", agent("a"), "waiting", "a", "a", "", ""},
		{"not a placement: a hand-back", agent("a"), "waiting", "a", "", "", ""},
		{"the status, not the claim", agent("a"), "waiting", "", "a", "status", ""},
		{"an administrator's", admin, "waiting", "", "a", "", ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := w.admit(t.Context(), placing(t, tc.user, tc.class, tc.before, tc.after, tc.sub))
			expect(t, r, tc.refuse)
			if tc.refuse != "" && !r.Allowed && !strings.Contains(r.Result.Message, "node agent "+tc.user.Username+" (node ") {
				t.Errorf("refusal %q does not name the node agent", r.Result.Message)
			}
		})
	}

	// A class or Node that cannot be read is refused as unavailable (the
	// node retries), never let through.
	for _, resource := range []string{"storageclasses", "nodes"} {
		broken := fake.NewClientset(objects...)
		broken.PrependReactor("get", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcd is down")
		})
		bw, err := New(broken, logtree.New().LeveledFor("admission"))
		if err != nil {
			t.Fatal(err)
		}
		r := bw.admit(t.Context(), placing(t, agent("a"), "host-a", "", "a", ""))
		if r.Allowed || r.Result.Code != http.StatusServiceUnavailable || !strings.Contains(r.Result.Message, "etcd is down") {
			t.Errorf("%s unreadable: %+v, want refused as unavailable", resource, r)
		}
	}
}
