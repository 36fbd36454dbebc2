// Package admission is the admission webhook that holds the PVs a node
// agent creates to claims placed on its node.
//
// The admission policies (clusterobjects.AdmissionPolicies) hold every
// other write of a node agent to its node, but a policy sees only the
// object it admits, and a PV names its claim in spec.claimRef. The PV
// controller binds a pending claim to a PV that names it before it looks
// at the claim's class or at where the claim was placed, so without this
// check a compromised node could create a PV for any pending claim in the
// cluster and draw the claim's pods, with their secrets, to itself.
//
// The webhook reads the claim live from the API server for each PV (one
// read per provisioned volume) and refuses a PV whose claim does not ask
// Plinth's driver for its volume or is not placed on the requesting node.
// A claimRef naming no existing claim, or a claim of another UID, is let
// through: the PV controller only ever releases such a PV, and a node
// whose claim was deleted meanwhile must not be kept retrying.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

const (
	// maxReview bounds a review's body: a PV is far smaller, and the API
	// server's own request limit is 3 MiB.
	maxReview = 3 << 20
	// claimTimeout bounds the claim read, inside the API server's 5 s
	// timeout for the webhook (clusterobjects.VolumeClaimsWebhook).
	claimTimeout = 4 * time.Second
)

// ConfigureClient sets what the webhook's API client needs in cfg: a rate
// limit far above client-go's default of 5 requests a second, since the
// webhook reads one claim for every PV any node in the cluster creates,
// and the PV's creation waits for that read (the API server's priority
// and fairness, not this client, protect it from too many); and protobuf,
// which costs both sides less than JSON.
func ConfigureClient(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "plinth-node/admission (" + names.DriverName + ")"
}

// Webhook answers the API server's admission reviews of PVs created by
// node agents (clusterobjects.VolumeClaimsWebhook).
type Webhook struct {
	client kubernetes.Interface
	log    logtree.LeveledLogger
}

// New returns the webhook; client reads claims (clusterobjects.AdmissionRole)
// and is configured by ConfigureClient.
func New(client kubernetes.Interface, log logtree.LeveledLogger) (*Webhook, error) {
	if client == nil {
		return nil, fmt.Errorf("admission: no API client")
	}
	if log == nil {
		return nil, fmt.Errorf("admission: no logger")
	}
	return &Webhook{client: client, log: log}, nil
}

// ServeHTTP reads one AdmissionReview and answers it.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(rw, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxReview))
	if err != nil {
		http.Error(rw, fmt.Sprintf("reading the review: %v", err), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	response := w.admit(r.Context(), review.Request)
	response.UID = review.Request.UID
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: response,
	})
	if err != nil {
		http.Error(rw, fmt.Sprintf("encoding the answer: %v", err), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_, _ = rw.Write(out)
}

// admit decides one request: a node agent's new PV must name a claim
// placed on its node, or no claim that exists.
func (w *Webhook) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Group != "" || req.Kind.Kind != "PersistentVolume" || req.Operation != admissionv1.Create {
		return allowed()
	}
	id := clusterobjects.IdentityOf(req.UserInfo)
	if !id.Restricted {
		// Not a node agent: the configuration's match condition sends
		// only theirs, and nothing else is this webhook's to judge.
		return allowed()
	}
	var pv corev1.PersistentVolume
	if err := json.Unmarshal(req.Object.Raw, &pv); err != nil {
		return refused(metav1.StatusReasonBadRequest, http.StatusBadRequest, fmt.Sprintf("decoding the PersistentVolume: %v", err))
	}
	ref := pv.Spec.ClaimRef
	if ref == nil {
		return allowed()
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	claim, err := w.client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return allowed()
	case err != nil:
		w.log.Warningf("PV %s of %s: reading claim %s/%s: %v", pv.Name, id.User, ref.Namespace, ref.Name, err)
		return refused(metav1.StatusReasonServiceUnavailable, http.StatusServiceUnavailable,
			fmt.Sprintf("cannot check the claim %s/%s that PV %s names (will be retried): %v", ref.Namespace, ref.Name, pv.Name, err))
	case ref.UID != "" && ref.UID != claim.UID:
		return allowed()
	}
	if why := Refusal(id.Node, claim); why != "" {
		msg := fmt.Sprintf("node agent %s (node %s) may create a PV only for a claim that asks %s for its volume and is placed on its node: claim %s %s",
			id.User, id.Node, names.DriverName, ownership.DescribeClaim(claim), why)
		w.log.Warningf("refused PV %s: %s", pv.Name, msg)
		return refused(metav1.StatusReasonForbidden, http.StatusForbidden, msg)
	}
	return allowed()
}

// Refusal says why node may not make a PV for claim, or "" if it may: the
// claim asks Plinth's driver for its volume (its storage-provisioner
// annotation) and the scheduler, or this node's placement, chose node
// for it (its selected-node annotation).
func Refusal(node string, claim *corev1.PersistentVolumeClaim) string {
	selected := claim.Annotations[ownership.AnnSelectedNode]
	switch provisioner := ownership.ClaimProvisioner(claim); {
	case node == "":
		return "cannot be checked: the request names no node"
	case provisioner != names.DriverName:
		return fmt.Sprintf("asks %q for its volume", provisioner)
	case selected == "":
		return "is not placed on any node"
	case selected != node:
		return fmt.Sprintf("is placed on node %s", selected)
	}
	return ""
}

func allowed() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func refused(reason metav1.StatusReason, code int32, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: reason, Code: code, Message: msg,
	}}
}

// Probe is a PV that the admission policies let node create and that
// names claim: the webhook's answer to it says whether the webhook is in
// force (a control plane's readiness check creates it as a dry run).
func Probe(node string, claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	name := ownership.VolumeIDFor(claim.UID)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ownership.LabelNode: ownership.NodeLabelValue(node)}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(1<<20, resource.BinarySI)},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: name}},
		},
	}
}
