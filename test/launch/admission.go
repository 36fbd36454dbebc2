package launch

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/pkg/logtree"
)

// admissionServer is the admission webhook (package admission) served by
// this process, as a control plane serves it beside its API server: with
// its own client identity (clusterobjects.AdmissionUser, bound to
// clusterobjects.AdmissionRole) and a serving certificate of the cluster's CA. Its log is
// logs/plinth-admission.log.
type admissionServer struct {
	url  string
	stop func() error
}

// startAdmission starts serving the webhook on a free loopback port. The
// API server learns of it in applyRBAC.
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
	serving := c.pki.Get("plinth-admission-serving")
	cert, err := tls.LoadX509KeyPair(serving.CertPath, serving.KeyPath)
	if err != nil {
		return fmt.Errorf("admission webhook serving certificate: %w", err)
	}
	logFile, err := os.Create(filepath.Join(c.LogDir, "plinth-admission.log"))
	if err != nil {
		return fmt.Errorf("admission webhook log: %w", err)
	}
	w, err := admission.New(client, logtree.New(logtree.WithSink(logFile)).LeveledFor("admission"))
	if err != nil {
		logFile.Close()
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logFile.Close()
		return fmt.Errorf("admission webhook listener: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := admission.Serve(ctx, l, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, w)
		if err != nil && ctx.Err() == nil {
			c.logf("admission webhook stopped: %v", err)
		}
		logFile.Close()
		done <- err
	}()
	c.admission = &admissionServer{
		url:  "https://" + l.Addr().String() + clusterobjects.WebhookPath,
		stop: func() error { cancel(); return <-done },
	}
	return nil
}

// stopAdmission stops the webhook, if it was started.
func (c *Cluster) stopAdmission() error {
	if c.admission == nil {
		return nil
	}
	return c.admission.stop()
}

// applyAdmission lets the webhook's identity read claims and registers
// the webhook with the API server.
func (c *Cluster) applyAdmission(ctx context.Context) error {
	role := clusterobjects.AdmissionRole()
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	binding := clusterobjects.AdmissionRoleBinding(rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: clusterobjects.AdmissionUser})
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	webhook := clusterobjects.NodeWritesWebhook(admissionv1.WebhookClientConfig{URL: &c.admission.url, CABundle: c.pki.CA.CertPEM()})
	if _, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, webhook, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", webhook.Name, err)
	}
	return nil
}
