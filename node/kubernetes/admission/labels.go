package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// The server's mutating path (clusterobjects.ClaimLabelsWebhook) keeps the
// label ownership.LabelNode of every claim of Plinth's equal to what the
// claim's annotations say (ownership.ClaimLabel), in the same write that
// changes them: the scheduler's placement, the PV controller's provisioner
// annotation, a node's placement or hand-back. Nodes select their claims
// by that label, so it is the one thing that decides which node hears of
// a claim; that is why it is written here, with the control plane's
// identity, and never by a node.
//
// A write whose author itself changes the label to anything but the
// derived value is refused, whoever the author is: a node that labelled
// another node's claim as its own would draw the claim's changes to
// itself, and one that relabelled its own claims would hide them. A write
// that leaves a stale label alone (the annotations changed) gets the
// label put right.

// Labels is the handler of the mutating path
// (clusterobjects.ClaimLabelsPath).
func (w *Webhook) Labels() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		serveReview(rw, r, func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return w.label(req)
		})
	})
}

// label decides one claim's creation or update: allowed as it is, allowed
// with a patch that puts the label right, or refused.
func (w *Webhook) label(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}) ||
		(req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return allowed()
	}
	var claim, old corev1.PersistentVolumeClaim
	if err := decode(req.Object.Raw, &claim); err != nil {
		return refused(metav1.StatusReasonBadRequest, http.StatusBadRequest, fmt.Sprintf("decoding the PersistentVolumeClaim: %v", err))
	}
	if req.Operation == admissionv1.Update {
		if err := decode(req.OldObject.Raw, &old); err != nil {
			return refused(metav1.StatusReasonBadRequest, http.StatusBadRequest, fmt.Sprintf("decoding the old PersistentVolumeClaim: %v", err))
		}
	}
	want, wantOK := ownership.ClaimLabel(&claim, names.DriverName)
	have, haveOK := claim.Labels[ownership.LabelNode]
	if have == want && haveOK == wantOK {
		return allowed()
	}
	if req.Operation == admissionv1.Update {
		before, beforeOK := old.Labels[ownership.LabelNode]
		if before != have || beforeOK != haveOK {
			return w.forbidden(fmt.Sprintf("%s may not set the label %s of claim %s to %s: the label is Plinth's, "+
				"derived from the claim's %s and %s annotations, which make it %s",
				req.UserInfo.Username, ownership.LabelNode, ownership.DescribeClaim(&claim),
				describeLabel(have, haveOK), ownership.AnnStorageProvisioner, ownership.AnnSelectedNode, describeLabel(want, wantOK)))
		}
	}
	patch, err := json.Marshal(labelPatch(claim.Labels != nil, want, wantOK))
	if err != nil {
		return refused(metav1.StatusReasonInternalError, http.StatusInternalServerError, fmt.Sprintf("encoding the label patch: %v", err))
	}
	patchType := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &patchType}
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// labelPatch sets LabelNode to value, or removes it when set is false;
// hasLabels says whether the claim has a labels map to add to.
func labelPatch(hasLabels bool, value string, set bool) []jsonPatchOp {
	path := "/metadata/labels/" + strings.ReplaceAll(ownership.LabelNode, "/", "~1")
	switch {
	case !set:
		return []jsonPatchOp{{Op: "remove", Path: path}}
	case !hasLabels:
		return []jsonPatchOp{{Op: "add", Path: "/metadata/labels", Value: map[string]string{ownership.LabelNode: value}}}
	}
	return []jsonPatchOp{{Op: "add", Path: path, Value: value}}
}

func describeLabel(value string, set bool) string {
	if !set {
		return "nothing (no label)"
	}
	return fmt.Sprintf("%q", value)
}
