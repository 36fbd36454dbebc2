package clusterobjects_test

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/launch"
)

// TestIdentity: WhoAmI reads each kind of node agent as the admission
// policies do, against a real API server, and CheckDaemonSetIdentity lets
// plinth-node of a DaemonSet run only as the service account the policies
// restrict, with a token bound to a pod on its own node: not as a node
// agent's certificate, not as the same service account moved to another
// namespace (a kustomize overlay's namespace:), not with a token bound to
// no pod.
func TestIdentity(t *testing.T) {
	cp := controllertest.ControlPlane(t)
	ctx := context.Background()
	whoAmI := func(c kubernetes.Interface) clusterobjects.Identity {
		t.Helper()
		id, err := clusterobjects.WhoAmI(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	refused := func(id clusterobjects.Identity, node, why string) {
		t.Helper()
		if err := clusterobjects.CheckDaemonSetIdentity(id, node); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("CheckDaemonSetIdentity(%+v, %s) = %v, want a refusal saying %q", id, node, err, why)
		}
	}

	kubeconfig, err := cp.NodeAgentKubeconfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := launch.KubeconfigClient(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if id := whoAmI(agent); id != (clusterobjects.Identity{User: clusterobjects.NodeAgentUser("node-a"), Node: "node-a", Restricted: true}) {
		t.Errorf("node agent certificate read as %+v", id)
	}
	refused(whoAmI(agent), "node-a", "namespace "+clusterobjects.DaemonSetNamespace)

	ds := whoAmI(serviceAccountClient(t, cp, clusterobjects.DaemonSetNamespace, clusterobjects.DaemonSetServiceAccount, "node-a"))
	if ds != (clusterobjects.Identity{User: clusterobjects.DaemonSetUser(), Node: "node-a", Restricted: true}) {
		t.Errorf("the DaemonSet's pod-bound token read as %+v", ds)
	}
	if err := clusterobjects.CheckDaemonSetIdentity(ds, "node-a"); err != nil {
		t.Errorf("the DaemonSet's own identity refused: %v", err)
	}
	refused(ds, "node-b", "bound to a pod on node node-a")

	moved := whoAmI(serviceAccountClient(t, cp, "storage-elsewhere", clusterobjects.DaemonSetServiceAccount, "node-a"))
	if moved.Restricted {
		t.Errorf("a service account in another namespace read as restricted: %+v", moved)
	}
	refused(moved, "node-a", "do not restrict")

	unbound := whoAmI(serviceAccountClient(t, cp, clusterobjects.DaemonSetNamespace, clusterobjects.DaemonSetServiceAccount, ""))
	refused(unbound, "node-a", "authentication.kubernetes.io/node-name")
}

// serviceAccountClient is a client with a token of service account ns/sa,
// bound to a pod on node (as a DaemonSet pod's projected token is) unless
// node is "". The pod is only an object: no kubelet runs it.
func serviceAccountClient(t *testing.T, cp *launch.ControlPlane, ns, sa, node string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	c := cp.Client
	for _, err := range []error{
		ignoreExists(c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})),
		ignoreExists(c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	req := &authenticationv1.TokenRequest{}
	if node != "" {
		pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-"},
			Spec: corev1.PodSpec{
				NodeName:           node,
				ServiceAccountName: sa,
				Containers:         []corev1.Container{{Name: "main", Image: "plinth-node"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0))
		})
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(cp.RESTConfig)
	cfg.BearerToken = tok.Status.Token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
