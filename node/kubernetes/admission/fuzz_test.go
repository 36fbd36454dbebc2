package admission

import (
	"bytes"
	"encoding/json"
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
	kjson "sigs.k8s.io/json"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

// The fuzz targets' world: node a (hostname host-a) and its claim, node
// b's claim, an unplaced claim, another driver's claim on node a, and
// a class of Plinth's and one of another driver's. The webhook reads it
// through a fake clientset: what is fuzzed is the decoding and the
// decision, which are pure logic.
var (
	fuzzClaims = []*corev1.PersistentVolumeClaim{
		claim("mine", "u-mine", names.DriverName, "a"),
		claim("theirs", "u-theirs", names.DriverName, "b"),
		claim("unplaced", "u-unplaced", names.DriverName, ""),
		claim("other", "u-other", "disk.example.com", "a"),
	}
	fuzzNode    = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{names.TopologyKeyHostname: "host-a"}}}
	fuzzPlinth  = &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: names.DriverName}
	fuzzDisk    = &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Provisioner: "disk.example.com"}
	fuzzPVKind  = metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"}
	fuzzCapKind = metav1.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "CSIStorageCapacity"}
	fuzzPVCKind = metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	fuzzKinds   = []metav1.GroupVersionKind{fuzzPVKind, fuzzCapKind, fuzzPVCKind, {Version: "v1", Kind: "Pod"}, {Group: "storage.k8s.io", Version: "v1beta1", Kind: "CSIStorageCapacity"}}
	fuzzOps     = []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect, ""}
	fuzzUsers   = []authenticationv1.UserInfo{
		{Username: clusterobjects.NodeAgentUser("a"), Groups: []string{clusterobjects.NodeAgentGroup}},
		{Username: clusterobjects.NodeAgentUser("b"), Groups: []string{clusterobjects.NodeAgentGroup}},
		{Username: clusterobjects.DaemonSetUser(), Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/node-name": {"a"}}},
		{Username: clusterobjects.DaemonSetUser()},
		{Username: clusterobjects.NodeAgentUser("a")},
		{Username: "admin", Groups: []string{"system:masters"}},
	}
)

// fuzzWebhook is the webhook over the fuzz targets' world.
func fuzzWebhook(f *testing.F) *Webhook {
	objs := []runtime.Object{fuzzNode, fuzzPlinth, fuzzDisk}
	for _, c := range fuzzClaims {
		objs = append(objs, c)
	}
	w, err := New(fake.NewClientset(objs...), logtree.New().LeveledFor("admission"))
	if err != nil {
		f.Fatal(err)
	}
	return w
}

// post has h answer body and checks the answer's form: a body that is an
// AdmissionReview with a request gets 200 and a well-formed
// AdmissionReview answering the request's UID (returned with the request),
// anything else a 4xx.
func post(t *testing.T, h http.Handler, body []byte) (*admissionv1.AdmissionRequest, *admissionv1.AdmissionResponse) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, clusterobjects.WebhookPath, bytes.NewReader(body)))
	var review admissionv1.AdmissionReview
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &review); err != nil || review.Request == nil {
		if rec.Code < 400 || rec.Code > 499 {
			t.Fatalf("no review (%v) answered %d %q, want a 4xx", err, rec.Code, rec.Body.String())
		}
		return nil, nil
	}
	var answer admissionv1.AdmissionReview
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("review answered %d (%s) %q, want 200 and JSON", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		t.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	r := answer.Response
	switch {
	case answer.APIVersion != "admission.k8s.io/v1" || answer.Kind != "AdmissionReview" || r == nil || answer.Request != nil:
		t.Fatalf("answer %q is not an AdmissionReview response", rec.Body.String())
	case r.UID != review.Request.UID:
		t.Fatalf("answer's UID %q, the request's %q", r.UID, review.Request.UID)
	case !r.Allowed && (r.Result == nil || r.Result.Code < 400 || r.Result.Message == ""):
		t.Fatalf("refusal without a status: %q", rec.Body.String())
	case r.Patch != nil && (!r.Allowed || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch):
		t.Fatalf("a patch that is no allowed JSON patch: %q", rec.Body.String())
	}
	return review.Request, r
}

// checkNodeWrite checks the webhook's decision r of req, by what the
// object decodes to: a node agent's creation of a PV or capacity object
// that does not decode is refused as a bad request; one that decodes is
// allowed only as the rules of volume.go and capacity.go say.
func checkNodeWrite(t *testing.T, req *admissionv1.AdmissionRequest, r *admissionv1.AdmissionResponse) {
	t.Helper()
	id := clusterobjects.IdentityOf(req.UserInfo)
	if !id.Restricted || req.Operation != admissionv1.Create {
		if !r.Allowed {
			t.Fatalf("%s's %s of a %v refused (%v): not the webhook's to judge", req.UserInfo.Username, req.Operation, req.Kind, r.Result)
		}
		return
	}
	badRequest := func(err error) {
		t.Helper()
		if r.Allowed || r.Result.Code != http.StatusBadRequest {
			t.Fatalf("%s's %v %q does not decode (%v), yet answered %+v", id.User, req.Kind, req.Object.Raw, err, r)
		}
	}
	switch req.Kind {
	case fuzzPVKind:
		var pv corev1.PersistentVolume
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &pv); err != nil {
			badRequest(err)
			return
		}
		ref := pv.Spec.ClaimRef
		if !r.Allowed || ref == nil {
			return
		}
		for _, c := range fuzzClaims {
			named := c.Namespace == ref.Namespace && c.Name == ref.Name && (ref.UID == "" || ref.UID == c.UID)
			if named && (id.Node == "" || c.Annotations[ownership.AnnStorageProvisioner] != names.DriverName || c.Annotations[ownership.AnnSelectedNode] != id.Node) {
				t.Fatalf("%s (node %q) allowed a PV for claim %s, placed on %q: %q", id.User, id.Node, c.Name, c.Annotations[ownership.AnnSelectedNode], req.Object.Raw)
			}
		}
	case fuzzCapKind:
		var c storagev1.CSIStorageCapacity
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &c); err != nil {
			badRequest(err)
			return
		}
		if !r.Allowed {
			return
		}
		topo := c.NodeTopology
		if id.Node != fuzzNode.Name || c.StorageClassName != fuzzPlinth.Name || topo == nil || len(topo.MatchExpressions) != 0 ||
			len(topo.MatchLabels) != 1 || topo.MatchLabels[names.TopologyKeyHostname] != "host-a" {
			t.Fatalf("%s (node %q) allowed capacity %q", id.User, id.Node, req.Object.Raw)
		}
	default:
		if !r.Allowed {
			t.Fatalf("%s's creation of a %v refused (%v): not the webhook's to judge", id.User, req.Kind, r.Result)
		}
	}
}

// checkLabel checks the label writer's decision r of req: a claim (or
// the old claim of an update) that does not decode is refused as a bad
// request; an allowed claim ends, with the patch applied, with the label
// ownership.ClaimLabel derives; only an update that itself changes the
// label is refused, and nothing else is.
func checkLabel(t *testing.T, req *admissionv1.AdmissionRequest, r *admissionv1.AdmissionResponse) {
	t.Helper()
	if req.Kind != fuzzPVCKind || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		if !r.Allowed || r.Patch != nil {
			t.Fatalf("%s of a %v answered %+v, want allowed as it is", req.Operation, req.Kind, r)
		}
		return
	}
	var c, old corev1.PersistentVolumeClaim
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &c); err != nil {
		if r.Allowed || r.Result.Code != http.StatusBadRequest {
			t.Fatalf("claim %q does not decode (%v), yet answered %+v", req.Object.Raw, err, r)
		}
		return
	}
	if req.Operation == admissionv1.Update {
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.OldObject.Raw, &old); err != nil {
			if r.Allowed || r.Result.Code != http.StatusBadRequest {
				t.Fatalf("old claim %q does not decode (%v), yet answered %+v", req.OldObject.Raw, err, r)
			}
			return
		}
	}
	have, haveOK := c.Labels[ownership.LabelNode]
	if !r.Allowed {
		before, beforeOK := old.Labels[ownership.LabelNode]
		if r.Result.Code != http.StatusForbidden || req.Operation != admissionv1.Update || (before == have && beforeOK == haveOK) {
			t.Fatalf("%s of claim %q (old %q) refused: %v", req.Operation, req.Object.Raw, req.OldObject.Raw, r.Result)
		}
		return
	}
	// The patch, read as the API server applies it to the claim's labels
	// (an operation on a label or a map the claim does not have fails).
	labels := map[string]string{}
	for k, v := range c.Labels {
		labels[k] = v
	}
	if r.Patch != nil {
		var ops []struct {
			Op, Path string
			Value    json.RawMessage
		}
		if err := json.Unmarshal(r.Patch, &ops); err != nil {
			t.Fatalf("patch %q: %v", r.Patch, err)
		}
		key := "/metadata/labels/" + strings.ReplaceAll(ownership.LabelNode, "/", "~1")
		for _, op := range ops {
			switch {
			case op.Op == "remove" && op.Path == key && haveOK:
				delete(labels, ownership.LabelNode)
			case op.Op == "add" && op.Path == key && c.Labels != nil:
				var v string
				if err := json.Unmarshal(op.Value, &v); err != nil {
					t.Fatalf("patch %q: %v", r.Patch, err)
				}
				labels[ownership.LabelNode] = v
			case op.Op == "add" && op.Path == "/metadata/labels" && c.Labels == nil:
				labels = map[string]string{}
				if err := json.Unmarshal(op.Value, &labels); err != nil {
					t.Fatalf("patch %q: %v", r.Patch, err)
				}
			default:
				t.Fatalf("patch %q of claim %q: operation %s %s on what the claim has", r.Patch, req.Object.Raw, op.Op, op.Path)
			}
		}
	}
	want, wantOK := ownership.ClaimLabel(&c, names.DriverName)
	if got, gotOK := labels[ownership.LabelNode]; got != want || gotOK != wantOK {
		t.Fatalf("claim %q allowed with patch %q: label %s, want %s", req.Object.Raw, r.Patch, describeLabel(got, gotOK), describeLabel(want, wantOK))
	}
}

// FuzzServeReview posts arbitrary bodies to the webhook and to the label
// writer. Whatever the body: no panic; an AdmissionReview with a request
// is answered 200 with a well-formed AdmissionReview of the request's
// UID, anything else with a 4xx; and the decision is as checkNodeWrite and
// checkLabel say.
//
// The seed corpus (TestServeHTTP's bodies, and reviews of the objects the
// other tests admit) runs with every `go test`; make test-fuzz fuzzes it
// briefly.
func FuzzServeReview(f *testing.F) {
	f.Add([]byte("{"), false)
	f.Add([]byte(`{"kind":"AdmissionReview"}`), false)
	f.Add([]byte(`{"kind":"AdmissionReview"}`), true)
	f.Add([]byte(`{"request":{}}`), true)
	f.Add([]byte(`{"request":null}`), false)
	f.Add([]byte(`{"request":{"uid":"u","kind":{"version":"v1","kind":"PersistentVolume"},"operation":"CREATE","userInfo":{"username":"system:plinth-node:a","groups":["plinth:nodes"]},"object":"x"}}`), false)
	f.Add([]byte(`{"request":{"uid":"u","kind":{"version":"v1","kind":"PersistentVolumeClaim"},"operation":"UPDATE","object":{},"oldObject":[]}}`), true)
	for _, s := range fuzzObjectSeeds(f) {
		f.Add(reviewBody(f, s.kind, s.op, s.user, "review-1", s.raw, s.oldRaw), s.kind == 2)
	}
	w := fuzzWebhook(f)
	labels := w.Labels()
	f.Fuzz(func(t *testing.T, body []byte, toLabels bool) {
		if toLabels {
			if req, r := post(t, labels, body); req != nil {
				checkLabel(t, req, r)
			}
			return
		}
		if req, r := post(t, w, body); req != nil {
			checkNodeWrite(t, req, r)
		}
	})
}

// FuzzAdmitObject has the webhook and the label writer answer
// syntactically valid AdmissionReviews of every kind, operation and
// identity of interest, whose objects are arbitrary JSON (arbitrary
// bytes are sent as a JSON string). The answers are checked as in
// FuzzServeReview.
func FuzzAdmitObject(f *testing.F) {
	for _, s := range fuzzObjectSeeds(f) {
		f.Add(s.kind, s.op, s.user, "review-1", s.raw, s.oldRaw)
	}
	w := fuzzWebhook(f)
	labels := w.Labels()
	f.Fuzz(func(t *testing.T, kind, op, user uint8, uid string, raw, oldRaw []byte) {
		body := reviewBody(t, kind, op, user, uid, raw, oldRaw)
		req, r := post(t, w, body)
		if req == nil {
			t.Fatalf("review %q not read", body)
		}
		checkNodeWrite(t, req, r)
		req, r = post(t, labels, body)
		checkLabel(t, req, r)
	})
}

type objectSeed struct {
	kind, op, user uint8
	raw, oldRaw    []byte
}

// fuzzObjectSeeds are the objects TestAdmit, TestAdmitCapacity and
// TestClaimLabelDecisions admit or refuse, and objects that do not
// decode.
func fuzzObjectSeeds(f *testing.F) []objectSeed {
	marshal := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	capacity := func(class string, labels map[string]string) []byte {
		return marshal(&storagev1.CSIStorageCapacity{
			ObjectMeta:       metav1.ObjectMeta{GenerateName: "cap-", Namespace: "plinth-system"},
			StorageClassName: class,
			NodeTopology:     &metav1.LabelSelector{MatchLabels: labels},
		})
	}
	var seeds []objectSeed
	for _, c := range fuzzClaims {
		for user := range uint8(4) {
			seeds = append(seeds, objectSeed{kind: 0, op: 0, user: user, raw: marshal(Probe("a", c))})
		}
		seeds = append(seeds,
			objectSeed{kind: 2, op: 0, user: 5, raw: marshal(c)},
			objectSeed{kind: 2, op: 1, user: 0, raw: marshal(labelled(c, "b")), oldRaw: marshal(c)},
			objectSeed{kind: 2, op: 1, user: 5, raw: marshal(c), oldRaw: marshal(labelled(c, "x"))})
	}
	for _, host := range []string{"host-a", "host-b", "a"} {
		for _, class := range []string{"local", "disk", "gone"} {
			seeds = append(seeds, objectSeed{kind: 1, op: 0, user: 0, raw: capacity(class, map[string]string{names.TopologyKeyHostname: host})})
		}
	}
	seeds = append(seeds, objectSeed{kind: 1, op: 0, user: 0, raw: capacity("local", map[string]string{names.TopologyKeyHostname: "host-a", "zone": "z"})})
	for _, bad := range []string{`null`, `"x"`, `[]`, `{"spec":{"capacity":{"storage":"x"}}}`, `{"spec":{"claimRef":{"name":1}}}`,
		`{"metadata":{"labels":"x"}}`, `{"nodeTopology":{"matchLabels":[]}}`, `{"capacity":"-"}`, "\xff"} {
		for kind := range uint8(3) {
			seeds = append(seeds, objectSeed{kind: kind, op: 0, user: 0, raw: []byte(bad)},
				objectSeed{kind: kind, op: 1, user: 0, raw: []byte(`{}`), oldRaw: []byte(bad)})
		}
	}
	return seeds
}

// reviewBody is an AdmissionReview of the kind, operation and user the
// fuzzed numbers pick, with raw and oldRaw as its objects (as JSON
// strings if they are not JSON).
func reviewBody(tb testing.TB, kind, op, user uint8, uid string, raw, oldRaw []byte) []byte {
	tb.Helper()
	object := func(b []byte) runtime.RawExtension {
		if len(b) == 0 {
			return runtime.RawExtension{}
		}
		if !json.Valid(b) {
			b, _ = json.Marshal(string(b))
		}
		return runtime.RawExtension{Raw: b}
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(uid),
			Kind:      fuzzKinds[int(kind)%len(fuzzKinds)],
			Operation: fuzzOps[int(op)%len(fuzzOps)],
			UserInfo:  fuzzUsers[int(user)%len(fuzzUsers)],
			Object:    object(raw),
			OldObject: object(oldRaw),
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// FuzzAdmitNodeWrite builds node agents' PVs and capacity objects from
// fuzzed fields (the claim a PV names; a capacity object's class, host
// labels and expressions), which byte mutations of JSON rarely reach, and
// has the webhook answer their creation, checked as in FuzzServeReview.
func FuzzAdmitNodeWrite(f *testing.F) {
	const (
		capacityObject = 1 << iota // a CSIStorageCapacity, not a PV
		noClaimRef                 // the PV names no claim
		noTopology                 // the capacity object has no node topology
		otherLabel                 // the topology has one more label
		expression                 // the topology has an expression
	)
	for _, c := range fuzzClaims {
		f.Add(uint8(0), uint8(0), c.Namespace, c.Name, string(c.UID), "", "", "", "")
		f.Add(uint8(0), uint8(2), c.Namespace, c.Name, "", "", "", "", "")
	}
	f.Add(uint8(noClaimRef), uint8(0), "", "", "", "", "", "", "")
	for _, class := range []string{"local", "disk", "gone"} {
		for _, host := range []string{"host-a", "host-b", "a"} {
			f.Add(uint8(capacityObject), uint8(0), class, host, "", "", "", "", "")
		}
	}
	f.Add(uint8(capacityObject|otherLabel), uint8(0), "local", "host-a", "", "zone", "z", "", "")
	f.Add(uint8(capacityObject|noTopology), uint8(0), "local", "host-a", "", "", "", "", "")
	w := fuzzWebhook(f)
	f.Fuzz(func(t *testing.T, flags, user uint8, ns, name, uid, key, value, exprKey, exprValue string) {
		var raw []byte
		var err error
		kind := uint8(0)
		if flags&capacityObject == 0 {
			// ns and name are the claim's; uid its UID.
			c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
			pv := Probe("a", c)
			if flags&noClaimRef != 0 {
				pv.Spec.ClaimRef = nil
			}
			raw, err = json.Marshal(pv)
		} else {
			// ns is the class; name the host.
			kind = 1
			c := &storagev1.CSIStorageCapacity{
				ObjectMeta:       metav1.ObjectMeta{GenerateName: "cap-", Namespace: "plinth-system"},
				StorageClassName: ns,
			}
			if flags&noTopology == 0 {
				c.NodeTopology = &metav1.LabelSelector{MatchLabels: map[string]string{names.TopologyKeyHostname: name}}
				if flags&otherLabel != 0 {
					c.NodeTopology.MatchLabels[key] = value
				}
				if flags&expression != 0 {
					c.NodeTopology.MatchExpressions = []metav1.LabelSelectorRequirement{
						{Key: exprKey, Operator: metav1.LabelSelectorOpIn, Values: []string{exprValue}}}
				}
			}
			raw, err = json.Marshal(c)
		}
		if err != nil {
			t.Fatal(err)
		}
		req, r := post(t, w, reviewBody(t, kind, 0, user, uid, raw, nil))
		checkNodeWrite(t, req, r)
	})
}
