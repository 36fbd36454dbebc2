package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"source.plinth.dev/node/kubernetes/clusterobjects"
)

// A webhook installed without a certificate manager (deploy/) keeps its
// own: a CA and a serving certificate in a Secret, which every replica
// shares (the first to start makes it), and the CA in the webhook
// configuration's caBundle, so that the API server trusts the servers.
// The Secret also keeps the CA it replaced, and the bundle holds both:
// while the replicas move to a new certificate, one by one, the API
// server trusts the old one and the new one (SecretKeeper).
const (
	// certificateLifetime is how long a certificate made here is valid.
	certificateLifetime = 10 * 365 * 24 * time.Hour
	// renewBefore: a certificate that ends sooner is replaced at start.
	renewBefore = 365 * 24 * time.Hour
	// The Secret's keys: those of a kubernetes.io/tls Secret, and the CA.
	keyCA   = "ca.crt"
	keyCert = corev1.TLSCertKey
	keyKey  = corev1.TLSPrivateKeyKey
	// keyPreviousCA is the CA that keyCA replaced, trusted beside it.
	keyPreviousCA = "previous-ca.crt"
)

// SecretCertificate returns the serving certificate for dnsName kept in
// the Secret namespace/name, and the CA bundle that verifies it (PEM: the
// CA that issued it, then the one it replaced, if any), making both when
// the Secret does not exist and replacing them when the certificate is
// not for dnsName or ends within a year. The CA replaced is the Secret's,
// or, when the Secret is gone (deleted to rotate the CA), the first of the
// node-writes configuration's caBundle: the one the replicas still
// running serve with. Replicas agree: the first write wins, the others
// read what it wrote.
func SecretCertificate(ctx context.Context, client kubernetes.Interface, namespace, name, dnsName string) (*tls.Certificate, []byte, error) {
	secrets := client.CoreV1().Secrets(namespace)
	for range 5 {
		secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			secret = nil
		case err != nil:
			return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
		}
		var previous []byte
		if secret != nil {
			cert, ca, err := usable(secret, dnsName, time.Now())
			if err == nil {
				return cert, ca, nil
			}
			// Replaced below, conditional on the version read.
			previous, _ = firstCA(secret.Data[keyCA], time.Now())
		}
		if previous == nil {
			previous = trustedCA(ctx, client)
		}
		data, err := issue(dnsName, time.Now())
		if err != nil {
			return nil, nil, err
		}
		if previous != nil {
			data[keyPreviousCA] = previous
		}
		if secret == nil {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
				Type:       corev1.SecretTypeTLS,
				Data:       data,
			}, metav1.CreateOptions{})
		} else {
			secret.Type, secret.Data = corev1.SecretTypeTLS, data
			_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			continue // another replica wrote first: use its
		case err != nil:
			return nil, nil, fmt.Errorf("writing Secret %s/%s: %w", namespace, name, err)
		}
	}
	return nil, nil, fmt.Errorf("the Secret %s/%s kept changing while its certificate was made", namespace, name)
}

// usable returns the Secret's certificate and CA bundle if the
// certificate is for dnsName and valid beyond renewBefore.
func usable(secret *corev1.Secret, dnsName string, now time.Time) (*tls.Certificate, []byte, error) {
	pair, err := tls.X509KeyPair(secret.Data[keyCert], secret.Data[keyKey])
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	if !slices.Contains(leaf.DNSNames, dnsName) || now.Add(renewBefore).After(leaf.NotAfter) {
		return nil, nil, errors.New("not for this name, or ending soon")
	}
	if len(secret.Data[keyCA]) == 0 {
		return nil, nil, errors.New("no CA")
	}
	bundle := slices.Clone(secret.Data[keyCA])
	if previous, ok := firstCA(secret.Data[keyPreviousCA], now); ok && !bytes.Equal(previous, bundle) {
		bundle = append(bundle, previous...)
	}
	return &pair, bundle, nil
}

// firstCA is the first certificate of the PEM bundle, as PEM, if it
// parses and is still valid at now.
func firstCA(bundle []byte, now time.Time) ([]byte, bool) {
	block, _ := pem.Decode(bundle)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || now.After(cert.NotAfter) {
		return nil, false
	}
	return pem.EncodeToMemory(block), true
}

// trustedCA is the first CA of the node-writes configuration's caBundle
// (the current one, as SetCABundle writes it), nil if none can be read.
func trustedCA(ctx context.Context, client kubernetes.Interface) []byte {
	cfg, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, clusterobjects.WebhookName, metav1.GetOptions{})
	if err != nil || len(cfg.Webhooks) == 0 {
		return nil
	}
	ca, _ := firstCA(cfg.Webhooks[0].ClientConfig.CABundle, time.Now())
	return ca
}

// issue makes a CA and a serving certificate for dnsName, as Secret data.
func issue(dnsName string, now time.Time) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the webhook's CA key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the webhook's key: %w", err)
	}
	var serials [2]*big.Int
	for i := range serials {
		if serials[i], err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120)); err != nil {
			return nil, fmt.Errorf("making a certificate serial number: %w", err)
		}
	}
	ca := &x509.Certificate{
		SerialNumber: serials[0], Subject: pkix.Name{CommonName: "plinth-admission-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certificateLifetime),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("making the webhook's CA: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serials[1], Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certificateLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, key.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("making the webhook's serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		keyCA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		keyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// SetCABundle makes the API server trust bundle for the server's
// webhooks: the caBundle of every webhook in clusterobjects.WebhookName
// and clusterobjects.ClaimLabelsWebhookName. It writes only what
// differs, and says whether it wrote.
func SetCABundle(ctx context.Context, client kubernetes.Interface, bundle []byte) (bool, error) {
	validating := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	changed, err := setBundle(ctx, bundle, clusterobjects.WebhookName, validating.Get, validating.Update,
		func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
			var clients []*admissionregistrationv1.WebhookClientConfig
			for i := range cfg.Webhooks {
				clients = append(clients, &cfg.Webhooks[i].ClientConfig)
			}
			return clients
		})
	if err != nil {
		return changed, err
	}
	mutating := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	changedLabels, err := setBundle(ctx, bundle, clusterobjects.ClaimLabelsWebhookName, mutating.Get, mutating.Update,
		func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
			var clients []*admissionregistrationv1.WebhookClientConfig
			for i := range cfg.Webhooks {
				clients = append(clients, &cfg.Webhooks[i].ClientConfig)
			}
			return clients
		})
	return changed || changedLabels, err
}

// setBundle sets bundle in every client configuration of the webhook
// configuration name, if any differs, and says whether it did.
func setBundle[T any](ctx context.Context, bundle []byte, name string,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	clients func(T) []*admissionregistrationv1.WebhookClientConfig) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading webhook configuration %s: %w", name, err)
		}
		changed = false
		for _, c := range clients(cfg) {
			if !bytes.Equal(c.CABundle, bundle) {
				c.CABundle, changed = bundle, true
			}
		}
		if !changed {
			return nil
		}
		_, err = update(ctx, cfg, metav1.UpdateOptions{})
		return err
	})
	return changed && err == nil, err
}
