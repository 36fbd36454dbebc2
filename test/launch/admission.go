package launch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/placement"
	"source.plinth.dev/node/kubernetes/snapshotapi"
	"source.plinth.dev/pkg/logtree"
)

// admissionServer is the admission webhook (package admission) served by
// the launcher itself, as the control plane would run it, with
// its own client identity (clusterobjects.AdmissionUser, bound to
// clusterobjects.AdmissionRole) and a serving certificate of the cluster's CA. Its log is
// logs/plinth-admission.log. Beside serving, it labels the claims written
// without their node label, and names the node of long-named nodes' PVs
// written without its name (admission.KeepBackfilled), and places the
// claims of Immediate classes (package placement, its Lease in
// kube-system), as admission-serve does.
type admissionServer struct {
	// addr is where it listens; a restart (StartAdmission) listens there
	// again, so that its registrations stay right.
	addr   string
	client kubernetes.Interface
	// leaseClient renews the placer's Lease.
	leaseClient kubernetes.Interface
	// snapshots reads the snapshot API for the placer.
	snapshots snapclient.Interface
	// rights is closed once the server's identity has its rights
	// (applyRBAC): the claim labeller and the placer wait for it, so that
	// their first calls are not refused (the webhook itself must serve
	// before, as applyRBAC's probe of it needs it).
	rights chan struct{}
	// after is how many processes were started before it: Stop stops it
	// after the newer ones and before the older ones (stopComponents).
	after int
	// stop is nil while it is stopped.
	stop func() error
}

// granted closes rights, once.
func (a *admissionServer) granted() {
	select {
	case <-a.rights:
	default:
		close(a.rights)
	}
}

// base is the server's URL without a path.
func (a *admissionServer) base() string { return "https://" + a.addr }

// startAdmission starts serving the webhook on a free loopback port. The
// API server learns of it in applyRBAC, which also gives it its rights.
func (c *Cluster) startAdmission() error {
	// The client admission-serve --kubeconfig would have.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfigPath("plinth-admission"))
	if err != nil {
		return fmt.Errorf("admission webhook client: %w", err)
	}
	admission.ConfigureClient(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("admission webhook client: %w", err)
	}
	// The placer's Lease has a client of its own, as in admission-serve.
	leaseClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("admission webhook client: %w", err)
	}
	snapshots, err := snapshotapi.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("admission webhook client: %w", err)
	}
	c.mu.Lock()
	after := len(c.procs)
	c.mu.Unlock()
	c.admission = &admissionServer{addr: "127.0.0.1:0", client: client, leaseClient: leaseClient, snapshots: snapshots,
		rights: make(chan struct{}), after: after}
	return c.serveAdmission()
}

// serveAdmission starts the server of c.admission, which is stopped.
func (c *Cluster) serveAdmission() error {
	a := c.admission
	serving := c.pki.Get("plinth-admission-serving")
	cert, err := tls.LoadX509KeyPair(serving.CertPath, serving.KeyPath)
	if err != nil {
		return fmt.Errorf("admission webhook serving certificate: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(c.LogDir, "plinth-admission.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("admission webhook log: %w", err)
	}
	logs := logtree.New(logtree.WithSink(logFile))
	log := logs.LeveledFor("admission")
	w, err := admission.New(a.client, log)
	if err != nil {
		logFile.Close()
		return err
	}
	l, err := net.Listen("tcp", a.addr)
	if err != nil {
		logFile.Close()
		return fmt.Errorf("admission webhook listener: %w", err)
	}
	a.addr = l.Addr().String()
	placer, err := placement.New(placement.Config{Client: a.client, Snapshots: a.snapshots, LeaseClient: a.leaseClient, Driver: names.DriverName,
		LeaseNamespace: metav1.NamespaceSystem, LeaseName: clusterobjects.PlacerLeaseName, Identity: placement.Identity(),
		Log: logs.LeveledFor("placement")})
	if err != nil {
		l.Close()
		logFile.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var helpers sync.WaitGroup
	authorized := func() bool {
		select {
		case <-a.rights:
			return true
		case <-ctx.Done():
			return false
		}
	}
	helpers.Go(func() {
		if authorized() {
			admission.KeepBackfilled(ctx, a.client, log, admission.BackfillInterval)
		}
	})
	helpers.Go(func() {
		if !authorized() {
			return
		}
		if err := placer.Run(ctx); err != nil {
			c.logf("placer stopped: %v", err)
		}
	})
	go func() {
		err := admission.Serve(ctx, l, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, w)
		if err != nil && ctx.Err() == nil {
			c.logf("admission webhook stopped: %v", err)
		}
		helpers.Wait()
		logFile.Close()
		done <- err
	}()
	a.stop = func() error { cancel(); a.stop = nil; return <-done }
	return nil
}

// stopAdmission stops the webhook, if it was started.
func (c *Cluster) stopAdmission() error {
	if c.admission == nil || c.admission.stop == nil {
		return nil
	}
	return c.admission.stop()
}

// StopAdmission stops the control plane's admission server, as a test of
// what waits for it (its writes are refused meanwhile); StartAdmission
// starts it again at the same address.
func (cp *ControlPlane) StopAdmission() error { return cp.stopAdmission() }

// StartAdmission starts the admission server StopAdmission stopped.
func (cp *ControlPlane) StartAdmission() error {
	if cp.admission == nil || cp.admission.stop != nil {
		return errors.New("launch: the admission server is not stopped")
	}
	return cp.serveAdmission()
}

// AdmissionClient is the admission server's client, with its identity.
func (cp *ControlPlane) AdmissionClient() kubernetes.Interface { return cp.admission.client }

// AdmissionKubeconfig is the kubeconfig file of the admission server's
// identity, for a test that needs more of its client than AdmissionClient
// shows (the API server's response headers).
func (cp *ControlPlane) AdmissionKubeconfig() string { return cp.kubeconfigPath("plinth-admission") }

// applyAdmission lets the webhook's identity read and label claims,
// gives its requests their FlowSchemas, holds it to the caBundle of its
// configurations (clusterobjects.WebhookConfigPolicies), and registers the
// webhook and the claim labels with the API server.
func (c *Cluster) applyAdmission(ctx context.Context) error {
	role := clusterobjects.AdmissionRole()
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	user := rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: clusterobjects.AdmissionUser}
	binding := clusterobjects.AdmissionRoleBinding(user)
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	// The placer's leader election, in kube-system.
	lease := clusterobjects.AdmissionLeaseRole(metav1.NamespaceSystem)
	if _, err := c.Client.RbacV1().Roles(lease.Namespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Role %s: %w", lease.Name, err)
	}
	leaseBinding := clusterobjects.AdmissionLeaseRoleBinding(metav1.NamespaceSystem, user)
	if _, err := c.Client.RbacV1().RoleBindings(leaseBinding.Namespace).Create(ctx, leaseBinding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating RoleBinding %s: %w", leaseBinding.Name, err)
	}
	// Its requests above the node agents' in the API server's queues.
	schemas, err := clusterobjects.AdmissionFlowSchemas(metav1.NamespaceSystem, user)
	if err != nil {
		return err
	}
	for _, fs := range schemas {
		if _, err := c.Client.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating FlowSchema %s: %w", fs.Name, err)
		}
	}
	// Its identity may change nothing of its configurations but their
	// caBundle, as in deploy/.
	for _, p := range clusterobjects.WebhookConfigPolicies() {
		if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ValidatingAdmissionPolicy %s: %w", p.Name, err)
		}
	}
	for _, b := range clusterobjects.WebhookConfigPolicyBindings() {
		if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ValidatingAdmissionPolicyBinding %s: %w", b.Name, err)
		}
	}
	url := c.admission.base() + clusterobjects.WebhookPath
	webhook := clusterobjects.NodeWritesWebhook(admissionv1.WebhookClientConfig{URL: &url, CABundle: c.pki.CA.CertPEM()})
	if _, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, webhook, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", webhook.Name, err)
	}
	return c.RegisterClaimLabels(ctx)
}

// RegisterClaimLabels registers the admission server's claim labels
// (clusterobjects.ClaimLabelsWebhook), as applyAdmission does: for a test
// that removed the registration, as a cluster of a version without it.
func (c *Cluster) RegisterClaimLabels(ctx context.Context) error {
	url := c.admission.base() + clusterobjects.ClaimLabelsPath
	labels := clusterobjects.ClaimLabelsWebhook(admissionv1.WebhookClientConfig{URL: &url, CABundle: c.pki.CA.CertPEM()})
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, labels, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating MutatingWebhookConfiguration %s: %w", labels.Name, err)
	}
	return nil
}
