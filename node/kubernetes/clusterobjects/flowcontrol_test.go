package clusterobjects_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/test/controllertest"
)

// TestAdmissionIsAboveTheNodes: the API server's priority and fairness
// puts the admission server's requests where AdmissionFlowSchemas says
// (as test/launch and deploy/ install them), by the FlowSchema and
// priority level it names in each response: its reads with the control
// plane's controllers (workload-high), its Lease requests with the
// leader elections, and a node agent's requests in neither, so that a
// node's PV creation, which holds a seat while the webhook reads the
// claim it names, never waits for a seat in the level the read needs.
func TestAdmissionIsAboveTheNodes(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	uids := map[types.UID]string{}
	for _, name := range []string{clusterobjects.AdmissionFlowSchemaName, clusterobjects.PlacerElectionFlowSchemaName} {
		fs, err := c.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("FlowSchema %s: %v", name, err)
		}
		uids[fs.UID] = "FlowSchema " + name
	}
	for _, name := range []string{"workload-high", "leader-election"} {
		pl, err := c.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("priority level %s: %v", name, err)
		}
		uids[pl.UID] = "priority level " + name
	}
	cp := controllertest.ControlPlane(t)
	nodeConfig, err := cp.NodeAgentKubeconfig("flow-node")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who, what     string
		kubeconfig    string
		request       func(kubernetes.Interface) error
		schema, level string
	}{{
		who: "the admission server", what: "a read of claims", kubeconfig: cp.AdmissionKubeconfig(),
		request: func(k kubernetes.Interface) error {
			_, err := k.CoreV1().PersistentVolumeClaims(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
		schema: "FlowSchema " + clusterobjects.AdmissionFlowSchemaName, level: "priority level workload-high",
	}, {
		who: "the admission server", what: "a read of the placer's Lease", kubeconfig: cp.AdmissionKubeconfig(),
		request: func(k kubernetes.Interface) error {
			// Not found before the placer's first term: classified all the
			// same.
			_, err := k.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, clusterobjects.PlacerLeaseName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		},
		schema: "FlowSchema " + clusterobjects.PlacerElectionFlowSchemaName, level: "priority level leader-election",
	}, {
		who: "a node agent", what: "a read of its claims", kubeconfig: nodeConfig,
		request: func(k kubernetes.Interface) error {
			_, err := k.CoreV1().PersistentVolumeClaims(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		},
	}} {
		schema, level := classified(t, tc.kubeconfig, tc.request)
		if schema == "" || level == "" {
			t.Fatalf("%s, %s: the API server named no FlowSchema or priority level", tc.who, tc.what)
		}
		if got := uids[types.UID(schema)]; got != tc.schema {
			t.Errorf("%s, %s: classified by %q, want %q", tc.who, tc.what, got, tc.schema)
		}
		if got := uids[types.UID(level)]; got != tc.level {
			t.Errorf("%s, %s: in %q, want %q", tc.who, tc.what, got, tc.level)
		}
	}
}

// classified makes request with the identity of kubeconfig and returns
// the UIDs of the FlowSchema and priority level the API server says it
// put the request in.
func classified(t *testing.T, kubeconfig string, request func(kubernetes.Interface) error) (schema, level string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				mu.Lock()
				schema, level = resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
				mu.Unlock()
			}
			return resp, err
		})
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := request(k); err != nil {
		t.Fatalf("request: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return schema, level
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
