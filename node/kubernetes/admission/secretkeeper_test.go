package admission

import (
	"bytes"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/pkg/logtree"
)

// Fast checks of a rotation's steps against a fake clientset; two real
// replicas rotating under a real API server are TestRotationRefusesNoNodeWrite's
// (node/cmd/plinth-node).

// configurations are the server's two registrations, at a Service.
func configurations() (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	path, labelsPath := clusterobjects.WebhookPath, clusterobjects.ClaimLabelsPath
	svc := func(p *string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "plinth-system", Name: "plinth-admission", Path: p}}
	}
	return clusterobjects.NodeWritesWebhook(svc(&path)), clusterobjects.ClaimLabelsWebhook(svc(&labelsPath))
}

// TestSecretKeeperRotates: a replica that finds the Secret gone makes a
// new CA, keeps the one the caBundle trusted beside it, and serves the
// new certificate only once its CA has been in the caBundle for
// bundleSettle; until then the old certificate, which the bundle still
// verifies.
func TestSecretKeeperRotates(t *testing.T) {
	cfg, labels := configurations()
	client := fake.NewClientset(cfg, labels)
	ctx := t.Context()
	oldCert, oldBundle, err := SecretCertificate(ctx, client, "plinth-system", "tls", dnsName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SetCABundle(ctx, client, oldBundle); err != nil {
		t.Fatal(err)
	}
	k := &SecretKeeper{client: client, namespace: "plinth-system", name: "tls", dnsName: dnsName,
		log: logtree.New().LeveledFor("test"), serving: oldCert}

	if err := client.CoreV1().Secrets("plinth-system").Delete(ctx, "tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	wait, err := k.refresh(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	bundle := bundleOf(t, client)
	served, _ := k.GetCertificate(nil)
	if wait != bundleSettle || served != oldCert {
		t.Errorf("right after the rotation: back in %v, serving the old certificate %v; want %v and true", wait, served == oldCert, bundleSettle)
	}
	if bytes.Equal(bundle, oldBundle) || !bytes.HasSuffix(bundle, oldBundle) {
		t.Errorf("the caBundle after the rotation:\n%s\nwant a new CA, then the old one:\n%s", bundle, oldBundle)
	}
	verify(t, bundle, oldCert.Certificate[0], dnsName)

	// Too early: still the old one.
	if _, err := k.refresh(ctx, now.Add(bundleSettle-time.Second)); err != nil {
		t.Fatal(err)
	}
	if served, _ := k.GetCertificate(nil); served != oldCert {
		t.Error("serving the new certificate before its CA settled in the caBundle")
	}
	// A replica that read the Secret just before the rotation writes the
	// bundle before it: the new CA settles again from when it is back.
	if _, err := SetCABundle(ctx, client, oldBundle); err != nil {
		t.Fatal(err)
	}
	now = now.Add(bundleSettle)
	if wait, err := k.refresh(ctx, now); err != nil || wait != bundleSettle {
		t.Errorf("after the old bundle was written back: back in %v (%v), want %v", wait, err, bundleSettle)
	}
	if served, _ := k.GetCertificate(nil); served != oldCert {
		t.Error("serving the new certificate right after its CA was put back into the caBundle")
	}
	wait, err = k.refresh(ctx, now.Add(bundleSettle))
	if err != nil {
		t.Fatal(err)
	}
	served, _ = k.GetCertificate(nil)
	if served == oldCert || wait != refreshInterval {
		t.Errorf("after bundleSettle: still the old certificate (%v), back in %v", served == oldCert, wait)
	}
	verify(t, bundleOf(t, client), served.Certificate[0], dnsName)

	// A second replica, still on the old certificate, reads the same
	// Secret: the same bundle, nothing written.
	other := &SecretKeeper{client: client, namespace: "plinth-system", name: "tls", dnsName: dnsName,
		log: logtree.New().LeveledFor("test"), serving: oldCert}
	if _, err := other.refresh(ctx, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := bundleOf(t, client); !bytes.Equal(got, bundle) {
		t.Errorf("the second replica changed the caBundle to\n%s", got)
	}
	if s, _ := other.GetCertificate(nil); s != oldCert {
		t.Error("the second replica switched before the new CA settled for it")
	}
}

// TestSecretCertificateKeepsThePreviousCA: a certificate replaced for
// ending soon leaves its CA in the bundle, after the new one; the one
// before that is dropped.
func TestSecretCertificateKeepsThePreviousCA(t *testing.T) {
	client := fake.NewClientset()
	ctx := t.Context()
	var cas [][]byte
	for range 3 {
		old, err := issue(dnsName, time.Now().Add(-certificateLifetime+renewBefore/2))
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, old[keyCA])
		secret, err := client.CoreV1().Secrets("plinth-system").Get(ctx, "tls", metav1.GetOptions{})
		if err == nil {
			secret.Data[keyCert], secret.Data[keyKey], secret.Data[keyCA] = old[keyCert], old[keyKey], old[keyCA]
			_, err = client.CoreV1().Secrets("plinth-system").Update(ctx, secret, metav1.UpdateOptions{})
		} else {
			_, err = client.CoreV1().Secrets("plinth-system").Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "plinth-system"}, Type: corev1.SecretTypeTLS, Data: old,
			}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		cert, bundle, err := SecretCertificate(ctx, client, "plinth-system", "tls", dnsName)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, bundle, cert.Certificate[0], dnsName)
		if !bytes.HasSuffix(bundle, old[keyCA]) || bytes.Equal(bundle, old[keyCA]) {
			t.Errorf("the bundle after replacing CA %d:\n%s\nwant the new CA, then the replaced one", len(cas), bundle)
		}
		for _, dropped := range cas[:len(cas)-1] {
			if bytes.Contains(bundle, dropped) {
				t.Errorf("the bundle keeps a CA replaced two rotations ago")
			}
		}
	}
}

func bundleOf(t *testing.T, client *fake.Clientset) []byte {
	t.Helper()
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), clusterobjects.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), clusterobjects.ClaimLabelsWebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, m.Webhooks[0].ClientConfig.CABundle) {
		t.Errorf("the two configurations trust different bundles")
	}
	return v.Webhooks[0].ClientConfig.CABundle
}
