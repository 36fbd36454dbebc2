package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

// These are fast checks of the decision alone, against a fake clientset;
// the webhook in force, called by a real API server for a real node
// agent, is clusterobjects' TestNodeWritesOwnOnly.

func claim(name, uid, provisioner, node string) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", UID: types.UID(uid), Annotations: map[string]string{},
	}}
	if provisioner != "" {
		c.Annotations[ownership.AnnStorageProvisioner] = provisioner
	}
	if node != "" {
		c.Annotations[ownership.AnnSelectedNode] = node
	}
	return c
}

func request(t *testing.T, user authenticationv1.UserInfo, pv *corev1.PersistentVolume) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pv)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID:       "review-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"},
		Operation: admissionv1.Create,
		UserInfo:  user,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

// expect: r allows the request if refuse is "", else it is a 403 whose
// message contains refuse.
func expect(t *testing.T, r *admissionv1.AdmissionResponse, refuse string) {
	t.Helper()
	switch {
	case refuse == "" && !r.Allowed:
		t.Errorf("refused (%v), want allowed", r.Result)
	case refuse != "" && r.Allowed:
		t.Errorf("allowed, want refused: %s", refuse)
	case refuse != "" && (r.Result.Code != http.StatusForbidden || !strings.Contains(r.Result.Message, refuse)):
		t.Errorf("refusal %d %q, want 403 saying %q", r.Result.Code, r.Result.Message, refuse)
	}
}

func TestAdmit(t *testing.T) {
	mine := claim("mine", "u-mine", names.DriverName, "a")
	theirs := claim("theirs", "u-theirs", names.DriverName, "b")
	unplaced := claim("unplaced", "u-unplaced", names.DriverName, "")
	other := claim("other", "u-other", "disk.example.com", "a")
	client := fake.NewClientset(mine, theirs, unplaced, other)
	w, err := New(client, logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	agentA := authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser("a"), Groups: []string{clusterobjects.NodeAgentGroup}}
	daemonSetA := authenticationv1.UserInfo{Username: clusterobjects.DaemonSetUser(),
		Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/node-name": {"a"}}}
	daemonSetNoNode := authenticationv1.UserInfo{Username: clusterobjects.DaemonSetUser()}
	admin := authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters"}}

	naming := func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolume { return Probe("a", c) }
	gone := naming(claim("gone", "u-gone", "", ""))
	reused := naming(theirs)
	reused.Spec.ClaimRef.UID = "u-earlier"
	unbound := naming(mine)
	unbound.Spec.ClaimRef = nil
	relabelled := naming(mine)
	relabelled.Labels[ownership.LabelNode] = "b"
	// Nodes whose names are longer than a label value, whose node label
	// is a hash that only the webhook can check.
	longA, longB := "a."+strings.Repeat("x", 78), "b."+strings.Repeat("x", 78)
	longMine := claim("long-mine", "u-long-mine", names.DriverName, longA)
	if _, err := client.CoreV1().PersistentVolumeClaims(longMine.Namespace).Create(t.Context(), longMine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentLong := authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser(longA), Groups: []string{clusterobjects.NodeAgentGroup}}
	longRelabelled := Probe(longA, longMine)
	longRelabelled.Labels[ownership.LabelNode] = ownership.NodeLabelValue(longB)
	for _, tc := range []struct {
		what   string
		user   authenticationv1.UserInfo
		pv     *corev1.PersistentVolume
		refuse string // "" allowed; else a part of the refusal
	}{
		{"its claim", agentA, naming(mine), ""},
		{"its claim, as the DaemonSet", daemonSetA, naming(mine), ""},
		{"node b's claim", agentA, naming(theirs), "is placed on node b"},
		{"node b's claim, as the DaemonSet", daemonSetA, naming(theirs), "is placed on node b"},
		{"an unplaced claim", agentA, naming(unplaced), "is not placed on any node"},
		{"another driver's claim", agentA, naming(other), `asks "disk.example.com" for its volume`},
		{"a DaemonSet token bound to no node", daemonSetNoNode, naming(mine), "names no node"},
		{"a claim that does not exist", agentA, gone, ""},
		{"a claim of that name but another UID", agentA, reused, ""},
		{"no claim", agentA, unbound, ""},
		{"node b's claim, as an administrator", admin, naming(theirs), ""},
		{"its claim, labelled as node b's", agentA, relabelled, "may create only objects labelled storage.plinth.dev/node=a (its node's): PV pvc-u-mine is labelled \"b\""},
		{"its claim, long names", agentLong, Probe(longA, longMine), ""},
		{"its claim, labelled with another long name's hash", agentLong, longRelabelled, "PV pvc-u-long-mine is labelled \"" + ownership.NodeLabelValue(longB) + "\""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := w.admit(t.Context(), request(t, tc.user, tc.pv))
			expect(t, r, tc.refuse)
		})
	}

	// A claim that cannot be read is refused as unavailable (the node
	// retries), never let through.
	broken := fake.NewClientset()
	broken.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd is down")
	})
	bw, err := New(broken, logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	r := bw.admit(t.Context(), request(t, agentA, naming(theirs)))
	if r.Allowed || r.Result.Code != http.StatusServiceUnavailable || !strings.Contains(r.Result.Message, "etcd is down") {
		t.Errorf("claim unreadable: %+v, want refused as unavailable", r)
	}
}

func TestServeHTTP(t *testing.T) {
	w, err := New(fake.NewClientset(claim("theirs", "u-theirs", names.DriverName, "b")), logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	user := authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser("a"), Groups: []string{clusterobjects.NodeAgentGroup}}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  request(t, user, Probe("a", claim("theirs", "u-theirs", "", ""))),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, clusterobjects.WebhookPath, bytes.NewReader(body)))
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("answer %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	if review.Kind != "AdmissionReview" || review.APIVersion != "admission.k8s.io/v1" || review.Response == nil ||
		review.Response.UID != "review-1" || review.Response.Allowed {
		t.Errorf("answer %+v, want the review's UID, refused", review)
	}

	for _, tc := range []struct {
		method, body string
		code         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, "{", http.StatusBadRequest},
		{http.MethodPost, `{"kind":"AdmissionReview"}`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, httptest.NewRequest(tc.method, clusterobjects.WebhookPath, strings.NewReader(tc.body)))
		if rec.Code != tc.code {
			t.Errorf("%s %q: %d, want %d", tc.method, tc.body, rec.Code, tc.code)
		}
	}
}

func TestAdmitCapacity(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{names.TopologyKeyHostname: "host-a"}}}
	plinth := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: names.DriverName}
	other := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.example.com"}
	w, err := New(fake.NewClientset(node, plinth, other), logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	agent := func(n string) authenticationv1.UserInfo {
		return authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser(n), Groups: []string{clusterobjects.NodeAgentGroup}}
	}
	capacity := func(class string, labels map[string]string) *storagev1.CSIStorageCapacity {
		return &storagev1.CSIStorageCapacity{
			ObjectMeta:       metav1.ObjectMeta{GenerateName: "cap-", Namespace: "plinth-system"},
			StorageClassName: class,
			NodeTopology:     &metav1.LabelSelector{MatchLabels: labels},
		}
	}
	host := func(h string) map[string]string { return map[string]string{names.TopologyKeyHostname: h} }
	labelled := func(c *storagev1.CSIStorageCapacity, label string) *storagev1.CSIStorageCapacity {
		c.Labels = map[string]string{ownership.LabelNode: label}
		return c
	}
	for _, tc := range []struct {
		what   string
		user   authenticationv1.UserInfo
		c      *storagev1.CSIStorageCapacity
		refuse string
	}{
		{"its host, Plinth's class", agent("a"), capacity("local", host("host-a")), ""},
		{"another host", agent("a"), capacity("local", host("host-b")), `is for host "host-b", the node's kubernetes.io/hostname is "host-a"`},
		{"its node's name, not its hostname label", agent("a"), capacity("local", host("a")), `is for host "a"`},
		{"another driver's class", agent("a"), capacity("disk", host("host-a")), `StorageClass "disk" belongs to "disk.example.com"`},
		{"a class that does not exist", agent("a"), capacity("gone", host("host-a")), `StorageClass "gone" does not exist`},
		{"a node without a Node", agent("b"), capacity("local", host("host-b")), "node b has no Node object"},
		{"more than a host", agent("a"), capacity("local", map[string]string{names.TopologyKeyHostname: "host-a", "zone": "z"}), "is not for one host"},
		{"an administrator's", authenticationv1.UserInfo{Username: "admin"}, capacity("disk", host("host-b")), ""},
		{"labelled as node b's", agent("a"), labelled(capacity("local", host("host-a")), "b"), "may create only objects labelled storage.plinth.dev/node=a (its node's)"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			// Labelled as package capacity labels them, unless the
			// case says otherwise.
			if _, ok := tc.c.Labels[ownership.LabelNode]; !ok {
				labelled(tc.c, ownership.NodeLabelValue(clusterobjects.IdentityOf(tc.user).Node))
			}
			raw, err := json.Marshal(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			r := w.admit(t.Context(), &admissionv1.AdmissionRequest{
				Kind:      metav1.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "CSIStorageCapacity"},
				Operation: admissionv1.Create, UserInfo: tc.user, Object: runtime.RawExtension{Raw: raw},
			})
			expect(t, r, tc.refuse)
		})
	}
}

// TestDecodingIsCaseSensitive: a PV whose JSON names node b's claim under
// "claimRef", the key the API server reads and stores, and its own under
// "ClaimRef" after it, is judged by the claim the API server sees.
// (encoding/json would take the last key of either case, and admit it.)
func TestDecodingIsCaseSensitive(t *testing.T) {
	mine := claim("mine", "u-mine", names.DriverName, "a")
	theirs := claim("theirs", "u-theirs", names.DriverName, "b")
	w, err := New(fake.NewClientset(mine, theirs), logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	agentA := authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser("a"), Groups: []string{clusterobjects.NodeAgentGroup}}
	req := request(t, agentA, Probe("a", mine))
	theirRef, err := json.Marshal(Probe("a", theirs).Spec.ClaimRef)
	if err != nil {
		t.Fatal(err)
	}
	twice := bytes.Replace(req.Object.Raw, []byte(`"claimRef":`), append(append([]byte(`"claimRef":`), theirRef...), []byte(`,"ClaimRef":`)...), 1)
	if bytes.Equal(twice, req.Object.Raw) {
		t.Fatal("the PV's JSON has no claimRef to double")
	}
	req.Object.Raw = twice
	expect(t, w.admit(t.Context(), req), "is placed on node b")
}
