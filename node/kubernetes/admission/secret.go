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
const (
	// certificateLifetime is how long a certificate made here is valid.
	certificateLifetime = 10 * 365 * 24 * time.Hour
	// renewBefore: a certificate that ends sooner is replaced at start.
	renewBefore = 365 * 24 * time.Hour
	// The Secret's keys: those of a kubernetes.io/tls Secret, and the CA.
	keyCA   = "ca.crt"
	keyCert = corev1.TLSCertKey
	keyKey  = corev1.TLSPrivateKeyKey
)

// SecretCertificate returns the serving certificate for dnsName kept in
// the Secret namespace/name, and the CA that issued it (PEM), making both
// when the Secret does not exist and replacing them when the certificate
// is not for dnsName or ends within a year. Replicas starting together
// agree: the first write wins, the others read what it wrote.
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
		if secret != nil {
			cert, ca, err := usable(secret, dnsName, time.Now())
			if err == nil {
				return cert, ca, nil
			}
			// Replaced below, conditional on the version read.
		}
		data, err := issue(dnsName, time.Now())
		if err != nil {
			return nil, nil, err
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

// usable returns the Secret's certificate and CA if the certificate is
// for dnsName and valid beyond renewBefore.
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
	return &pair, secret.Data[keyCA], nil
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

// SetCABundle makes the API server trust ca for the server's webhooks:
// the caBundle of every webhook in clusterobjects.WebhookName and
// clusterobjects.ClaimLabelsWebhookName. It writes only what differs.
func SetCABundle(ctx context.Context, client kubernetes.Interface, ca []byte) error {
	validating := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err := setBundle(ctx, ca, clusterobjects.WebhookName, validating.Get, validating.Update,
		func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
			var clients []*admissionregistrationv1.WebhookClientConfig
			for i := range cfg.Webhooks {
				clients = append(clients, &cfg.Webhooks[i].ClientConfig)
			}
			return clients
		})
	if err != nil {
		return err
	}
	mutating := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return setBundle(ctx, ca, clusterobjects.ClaimLabelsWebhookName, mutating.Get, mutating.Update,
		func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
			var clients []*admissionregistrationv1.WebhookClientConfig
			for i := range cfg.Webhooks {
				clients = append(clients, &cfg.Webhooks[i].ClientConfig)
			}
			return clients
		})
}

// setBundle sets ca in every client configuration of the webhook
// configuration name, if any differs.
func setBundle[T any](ctx context.Context, ca []byte, name string,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	clients func(T) []*admissionregistrationv1.WebhookClientConfig) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading webhook configuration %s: %w", name, err)
		}
		changed := false
		for _, c := range clients(cfg) {
			if !bytes.Equal(c.CABundle, ca) {
				c.CABundle, changed = ca, true
			}
		}
		if !changed {
			return nil
		}
		_, err = update(ctx, cfg, metav1.UpdateOptions{})
		return err
	})
}
