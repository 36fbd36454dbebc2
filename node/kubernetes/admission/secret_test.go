package admission

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"source.plinth.dev/node/kubernetes/clusterobjects"
)

// Fast checks of the certificate's life in its Secret, against a fake
// clientset; deploy/'s webhook keeping it for real is test/deploy's.

const dnsName = "plinth-admission.plinth-system.svc"

func verify(t *testing.T, ca []byte, leaf []byte, name string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA in the bundle")
	}
	cert, err := x509.ParseCertificate(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
		t.Errorf("the serving certificate does not verify for %s: %v", name, err)
	}
}

func TestSecretCertificate(t *testing.T) {
	client := fake.NewClientset()
	ctx := t.Context()
	cert, ca, err := SecretCertificate(ctx, client, "plinth-system", "tls", dnsName)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, ca, cert.Certificate[0], dnsName)
	secret, err := client.CoreV1().Secrets("plinth-system").Get(ctx, "tls", metav1.GetOptions{})
	if err != nil || secret.Type != corev1.SecretTypeTLS {
		t.Fatalf("the Secret: %+v (%v)", secret, err)
	}

	// A second replica, or a restart, uses what is there.
	again, ca2, err := SecretCertificate(ctx, client, "plinth-system", "tls", dnsName)
	if err != nil || !bytes.Equal(ca, ca2) || !bytes.Equal(again.Certificate[0], cert.Certificate[0]) {
		t.Errorf("second start: new certificate or CA (%v)", err)
	}

	// Another name (the Service moved) gets a new certificate.
	moved, ca3, err := SecretCertificate(ctx, client, "plinth-system", "tls", "other.plinth-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	verify(t, ca3, moved.Certificate[0], "other.plinth-system.svc")

	// A certificate ending within renewBefore is replaced.
	old, err := issue(dnsName, time.Now().Add(-certificateLifetime+renewBefore/2))
	if err != nil {
		t.Fatal(err)
	}
	secret, err = client.CoreV1().Secrets("plinth-system").Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data = old
	if _, err := client.CoreV1().Secrets("plinth-system").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed, _, err := SecretCertificate(ctx, client, "plinth-system", "tls", dnsName)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(renewed.Certificate[0])
	if err != nil || time.Until(leaf.NotAfter) < renewBefore {
		t.Errorf("the certificate ending soon was kept: ends %v (%v)", leaf.NotAfter, err)
	}

	// Two replicas starting together: the one whose create loses reads
	// the winner's Secret.
	racing := fake.NewClientset()
	var winner []byte
	racing.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if winner != nil {
			return false, nil, nil
		}
		data, err := issue(dnsName, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		winner = data[keyCA]
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "plinth-system"}, Type: corev1.SecretTypeTLS, Data: data}
		if err := racing.Tracker().Add(s); err != nil {
			t.Fatal(err)
		}
		return true, nil, alreadyExists()
	})
	_, got, err := SecretCertificate(ctx, racing, "plinth-system", "tls", dnsName)
	if err != nil || !bytes.Equal(got, winner) {
		t.Errorf("losing the race: CA %q, want the winner's (%v)", got, err)
	}
}

func TestSetCABundle(t *testing.T) {
	path := clusterobjects.WebhookPath
	cfg := clusterobjects.NodeWritesWebhook(admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "plinth-system", Name: "plinth-admission", Path: &path},
	})
	labelsPath := clusterobjects.ClaimLabelsPath
	labels := clusterobjects.ClaimLabelsWebhook(admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "plinth-system", Name: "plinth-admission", Path: &labelsPath},
	})
	client := fake.NewClientset(cfg, labels)
	updates := 0
	for _, resource := range []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"} {
		client.PrependReactor("update", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			updates++
			return false, nil, nil
		})
	}
	for range 2 {
		if _, err := SetCABundle(t.Context(), client, []byte("ca")); err != nil {
			t.Fatal(err)
		}
	}
	got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), cfg.Name, metav1.GetOptions{})
	if err != nil || string(got.Webhooks[0].ClientConfig.CABundle) != "ca" {
		t.Errorf("caBundle %q (%v)", got.Webhooks[0].ClientConfig.CABundle, err)
	}
	gotLabels, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), labels.Name, metav1.GetOptions{})
	if err != nil || string(gotLabels.Webhooks[0].ClientConfig.CABundle) != "ca" {
		t.Errorf("the claim labels' caBundle %q (%v)", gotLabels.Webhooks[0].ClientConfig.CABundle, err)
	}
	if updates != 2 {
		t.Errorf("%d updates for one change of each of two configurations", updates)
	}
}

func alreadyExists() error {
	return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "tls")
}
