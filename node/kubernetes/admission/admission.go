// Package admission is the admission webhook that holds what a node agent
// creates to its own node where the admission policies cannot.
//
// The admission policies (clusterobjects.AdmissionPolicies) hold every
// other write of a node agent to its node, but a policy sees only the
// object it admits, and two objects a node creates name others:
//   - a PV names its claim in spec.claimRef. The PV controller binds a
//     pending claim to a PV that names it before it looks at the claim's
//     class or at where the claim was placed, so without this check a
//     compromised node could create a PV for any pending claim in the
//     cluster and draw the claim's pods, with their secrets, to itself
//     (volume.go);
//   - a CSIStorageCapacity names a host and a StorageClass, and the
//     scheduler sends pods whose claims wait for their first consumer
//     where the capacity says there is room: a node publishing room for
//     another host, or for another driver's class, would misplace pods,
//     or draw another driver's pods to itself (capacity.go).
//
// Both carry their node's label (ownership.LabelNode), which for a node
// whose name is longer than a label value is a hash the policies cannot
// compute; the webhook checks it for both (admitLabel).
//
// A node agent never places a claim (the claims policy refuses every
// placement it tries), so its writes of claims need no check here.
//
// The webhook reads what the object names live from the API server, once
// per PV or capacity object created, and refuses what the node may not
// create, with a message that says why.
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
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kjson "sigs.k8s.io/json"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

const (
	// maxReview bounds a review's body: a PV or a capacity object is far
	// smaller, and the API server's own request limit is 3 MiB.
	maxReview = 3 << 20
	// readTimeout bounds the reads of a review, inside the API server's
	// 5 s timeout for the webhook (clusterobjects.NodeWritesWebhook).
	readTimeout = 4 * time.Second
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

// Webhook answers the API server's admission reviews of the PVs and
// capacity objects node agents create (clusterobjects.NodeWritesWebhook).
type Webhook struct {
	client kubernetes.Interface
	log    logtree.LeveledLogger
}

// New returns the webhook; client reads what the objects name
// (clusterobjects.AdmissionRole) and is configured by ConfigureClient.
func New(client kubernetes.Interface, log logtree.LeveledLogger) (*Webhook, error) {
	if client == nil {
		return nil, fmt.Errorf("admission: no API client")
	}
	if log == nil {
		return nil, fmt.Errorf("admission: no logger")
	}
	return &Webhook{client: client, log: log}, nil
}

// ServeHTTP reads one AdmissionReview of a node agent's creation and
// answers it.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	serveReview(rw, r, w.admit)
}

// serveReview reads one AdmissionReview from r, has decide answer it, and
// writes the answer: the part every path of the server shares.
func serveReview(rw http.ResponseWriter, r *http.Request, decide func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
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
	if err := decode(body, &review); err != nil || review.Request == nil {
		http.Error(rw, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	response := decide(r.Context(), review.Request)
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

// decode reads JSON into v as the API server does: keys match fields in
// their exact case. encoding/json would also take "ClaimRef" for
// claimRef, the last such key winning, and so could judge another object
// than the one the API server stores. (The API server re-encodes the
// objects it sends, so this is a second wall, not the first.)
func decode(data []byte, v any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(data, v)
}

// admit decides one request by the kind of object a node agent creates.
func (w *Webhook) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	id := clusterobjects.IdentityOf(req.UserInfo)
	if !id.Restricted || req.Operation != admissionv1.Create {
		// Not a node agent's creation: the configuration sends only
		// those, and nothing else is this webhook's to judge.
		return allowed()
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	switch req.Kind {
	case metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"}:
		var pv corev1.PersistentVolume
		if err := decode(req.Object.Raw, &pv); err != nil {
			return refused(metav1.StatusReasonBadRequest, http.StatusBadRequest, fmt.Sprintf("decoding the PersistentVolume: %v", err))
		}
		if r := w.admitLabel(id, "PV "+pv.Name, pv.Labels); r != nil {
			return r
		}
		return w.admitVolume(ctx, id, &pv)
	case metav1.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "CSIStorageCapacity"}:
		var c storagev1.CSIStorageCapacity
		if err := decode(req.Object.Raw, &c); err != nil {
			return refused(metav1.StatusReasonBadRequest, http.StatusBadRequest, fmt.Sprintf("decoding the CSIStorageCapacity: %v", err))
		}
		if r := w.admitLabel(id, "CSIStorageCapacity "+c.Namespace+"/"+c.Name+c.GenerateName, c.Labels); r != nil {
			return r
		}
		return w.admitCapacity(ctx, id, &c)
	}
	return allowed()
}

// admitLabel refuses a node agent's new PV or capacity object (what,
// with labels) whose node label is not its node's
// (ownership.NodeLabelValue), and returns nil if it is. The policies check
// a label equal to a short name themselves, but a long name's label is a
// hash they cannot compute: without this check, a long-named node could
// label a new object as another's, and so put it among the objects that
// node watches and acts on. The label never changes after the creation
// (the policies), so the creation is all there is to check.
func (w *Webhook) admitLabel(id clusterobjects.Identity, what string, labels map[string]string) *admissionv1.AdmissionResponse {
	if id.Node == "" {
		return nil // each kind's own check refuses a request that names no node
	}
	want := ownership.NodeLabelValue(id.Node)
	if have, ok := labels[ownership.LabelNode]; !ok || have != want {
		return w.forbidden(fmt.Sprintf("node agent %s (node %s) may create only objects labelled %s=%s (its node's): %s is labelled %s",
			id.User, id.Node, ownership.LabelNode, want, what, describeLabel(have, ok)))
	}
	return nil
}

// unavailable refuses what could not be checked: the node retries it.
func (w *Webhook) unavailable(what string, err error) *admissionv1.AdmissionResponse {
	w.log.Warningf("%s: %v", what, err)
	return refused(metav1.StatusReasonServiceUnavailable, http.StatusServiceUnavailable,
		fmt.Sprintf("cannot check %s (will be retried): %v", what, err))
}

// forbidden refuses what the node may not create, and logs it: a node that
// tries is one to look at.
func (w *Webhook) forbidden(msg string) *admissionv1.AdmissionResponse {
	w.log.Warningf("refused: %s", msg)
	return refused(metav1.StatusReasonForbidden, http.StatusForbidden, msg)
}

func allowed() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func refused(reason metav1.StatusReason, code int32, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: reason, Code: code, Message: msg,
	}}
}
