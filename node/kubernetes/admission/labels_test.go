package admission

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

// These are fast checks of the label decisions alone; the claim labels
// in force, called by a real API server, are TestClaimLabels* in
// clusterobjects.

func labelled(c *corev1.PersistentVolumeClaim, value string) *corev1.PersistentVolumeClaim {
	c = c.DeepCopy()
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[ownership.LabelNode] = value
	return c
}

func labelReview(t *testing.T, op admissionv1.Operation, claim, old *corev1.PersistentVolumeClaim) *admissionv1.AdmissionRequest {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID:       "review-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"},
		Operation: op,
		UserInfo:  authenticationv1.UserInfo{Username: "someone"},
	}
	for raw, obj := range map[*runtime.RawExtension]*corev1.PersistentVolumeClaim{&req.Object: claim, &req.OldObject: old} {
		if obj == nil {
			continue
		}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		raw.Raw = b
	}
	return req
}

// TestClaimLabelDecisions: the label ends as ClaimLabel says on every
// write that does not itself set it, and a write that sets it to anything
// else is refused.
func TestClaimLabelDecisions(t *testing.T) {
	w, err := New(fake.NewClientset(), logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	placed := claim("data", "u-1", names.DriverName, "node-a")
	unplaced := claim("data", "u-1", names.DriverName, "")
	foreign := claim("data", "u-1", "other.example.com", "node-a")
	long := strings.Repeat("n", 70)
	for _, tc := range []struct {
		name       string
		op         admissionv1.Operation
		claim, old *corev1.PersistentVolumeClaim
		refuse     bool
		// want is the label after the patch; "-" for none.
		want string
	}{
		{"created placed", admissionv1.Create, placed, nil, false, "node-a"},
		{"created unplaced", admissionv1.Create, unplaced, nil, false, ownership.LabelUnplaced},
		{"created with a wrong label", admissionv1.Create, labelled(placed, "node-b"), nil, false, "node-a"},
		{"created foreign with a label", admissionv1.Create, labelled(foreign, "node-a"), nil, false, "-"},
		{"created foreign", admissionv1.Create, foreign, nil, false, "-"},
		{"placed by the scheduler", admissionv1.Update, labelled(placed, ownership.LabelUnplaced), labelled(unplaced, ownership.LabelUnplaced), false, "node-a"},
		{"placed on a long name", admissionv1.Update, labelled(claim("data", "u-1", names.DriverName, long), ownership.LabelUnplaced), labelled(unplaced, ownership.LabelUnplaced), false, ownership.NodeLabelValue(long)},
		{"handed back", admissionv1.Update, labelled(unplaced, "node-a"), labelled(placed, "node-a"), false, ownership.LabelUnplaced},
		{"provisioner annotated", admissionv1.Update, placed, claim("data", "u-1", "", "node-a"), false, "node-a"},
		{"unchanged", admissionv1.Update, labelled(placed, "node-a"), labelled(placed, "node-a"), false, "node-a"},
		{"upgrade backfill", admissionv1.Update, labelled(placed, "node-a"), placed, false, "node-a"},
		{"relabelled to another node", admissionv1.Update, labelled(placed, "node-b"), labelled(placed, "node-a"), true, ""},
		{"label removed", admissionv1.Update, placed, labelled(placed, "node-a"), true, ""},
		{"label set on an unlabelled claim", admissionv1.Update, labelled(placed, "node-b"), placed, true, ""},
		{"foreign claim labelled", admissionv1.Update, labelled(foreign, "node-a"), foreign, true, ""},
		{"foreign claim's stale label removed", admissionv1.Update, labelled(foreign, "node-a"), labelled(foreign, "node-a"), false, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := w.label(labelReview(t, tc.op, tc.claim, tc.old))
			if tc.refuse {
				if r.Allowed || r.Result == nil || r.Result.Code != 403 || !strings.Contains(r.Result.Message, ownership.LabelNode) {
					t.Fatalf("answer %+v; want a 403 that names the label", r)
				}
				return
			}
			if !r.Allowed {
				t.Fatalf("refused: %+v", r.Result)
			}
			got := tc.claim
			if r.Patch != nil {
				orig, _ := json.Marshal(tc.claim)
				p, err := jsonpatch.DecodePatch(r.Patch)
				if err != nil {
					t.Fatalf("patch %s: %v", r.Patch, err)
				}
				out, err := p.Apply(orig)
				if err != nil {
					t.Fatalf("applying %s: %v", r.Patch, err)
				}
				got = &corev1.PersistentVolumeClaim{}
				if err := json.Unmarshal(out, got); err != nil {
					t.Fatal(err)
				}
			}
			value, ok := got.Labels[ownership.LabelNode]
			if !ok {
				value = "-"
			}
			if value != tc.want {
				t.Errorf("label %q after patch %s, want %q", value, r.Patch, tc.want)
			}
		})
	}
}

// TestLabelIgnoresOtherWrites: the path answers what is not a claim's
// creation or update without a patch.
func TestLabelIgnoresOtherWrites(t *testing.T) {
	w, err := New(fake.NewClientset(), logtree.New().LeveledFor("admission"))
	if err != nil {
		t.Fatal(err)
	}
	req := labelReview(t, admissionv1.Delete, nil, claim("data", "u-1", names.DriverName, "node-a"))
	if r := w.label(req); !r.Allowed || r.Patch != nil {
		t.Errorf("deletion: %+v, want allowed as it is", r)
	}
	req = labelReview(t, admissionv1.Create, claim("data", "u-1", names.DriverName, "node-a"), nil)
	req.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"}
	if r := w.label(req); !r.Allowed || r.Patch != nil {
		t.Errorf("a PV: %+v, want allowed as it is", r)
	}
}
