package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/pkg/logtree"
)

// The replicas of a webhook that keeps its certificate in a Secret
// (SecretCertificate) rotate it together, with no refusal on the way:
//
//  1. Whoever replaces the certificate (a replica finding it missing or
//     ending soon) writes the new CA to the Secret with the old one
//     beside it, and the bundle of both to the configurations' caBundle.
//  2. Every replica reads the Secret again every minute and writes its
//     bundle too (the same bytes from every replica: none undoes
//     another's), so a bundle removed or overwritten is put back.
//  3. A replica serves the Secret's certificate only once its CA has been
//     in the caBundle for bundleSettle; until then it serves the one it
//     had, which the old CA, still in the bundle, verifies. The API server
//     learns of a changed configuration through a watch, so for a moment
//     after a write it still trusts the bundle before.
const (
	// refreshInterval is how often a replica reads the Secret again.
	refreshInterval = time.Minute
	// retryInterval is how soon it tries again after a failure.
	retryInterval = 2 * time.Second
	// bundleSettle is how long a CA must have been in the caBundle before
	// a replica serves a certificate it issued: far longer than an API
	// server's watch of the configurations takes to deliver a change.
	bundleSettle = 5 * time.Second
)

// SecretKeeper serves the webhook's certificate kept in a Secret
// (SecretCertificate), keeps the configurations' caBundle set to the
// Secret's CAs (SetCABundle), and moves to a renewed certificate without
// a restart.
type SecretKeeper struct {
	client                   kubernetes.Interface
	namespace, name, dnsName string
	log                      logtree.LeveledLogger

	mu sync.Mutex
	// serving is what GetCertificate returns.
	serving *tls.Certificate
	// next is the Secret's certificate while it waits for its CA to
	// settle in the caBundle (since nextSince); nil when serving is it.
	next      *tls.Certificate
	nextSince time.Time
}

// NewSecretKeeper reads (or makes) the certificate in the Secret
// namespace/name for dnsName and sets the caBundle. If that changed the
// caBundle, it returns only after bundleSettle, so that the first
// connection finds the API server trusting the certificate. A caBundle it
// cannot set (the configurations are not there yet) is retried by Run.
func NewSecretKeeper(ctx context.Context, client kubernetes.Interface, namespace, name, dnsName string, log logtree.LeveledLogger) (*SecretKeeper, error) {
	k := &SecretKeeper{client: client, namespace: namespace, name: name, dnsName: dnsName, log: log}
	cert, bundle, err := SecretCertificate(ctx, client, namespace, name, dnsName)
	if err != nil {
		return nil, err
	}
	k.serving = cert
	changed, err := SetCABundle(ctx, client, bundle)
	if err != nil {
		log.Warningf("setting the webhook's caBundle (retried every %v until it is set): %v", retryInterval, err)
	}
	if changed {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(bundleSettle):
		}
	}
	return k, nil
}

// GetCertificate is the certificate to serve, for tls.Config.
func (k *SecretKeeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.serving, nil
}

// Run reads the Secret again and sets the caBundle every refreshInterval
// (sooner while a new certificate settles, or after a failure) until ctx
// ends.
func (k *SecretKeeper) Run(ctx context.Context) {
	failing := false
	wait := time.Duration(0) // the first round at once: NewSecretKeeper's may have failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		var err error
		wait, err = k.refresh(ctx, time.Now())
		switch {
		case err != nil && !failing:
			k.log.Warningf("keeping the webhook's certificate (retried every %v until it works): %v", retryInterval, err)
		case err == nil && failing:
			k.log.Infof("the webhook's certificate and caBundle are set")
		}
		failing = err != nil
		if failing {
			wait = retryInterval
		}
	}
}

// refresh is one round of Run: it returns when to come back.
func (k *SecretKeeper) refresh(ctx context.Context, now time.Time) (time.Duration, error) {
	cert, bundle, err := SecretCertificate(ctx, k.client, k.namespace, k.name, k.dnsName)
	if err != nil {
		return 0, err
	}
	changed, err := SetCABundle(ctx, k.client, bundle)
	if err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case sameCertificate(cert, k.serving):
		k.next = nil
		return refreshInterval, nil
	case k.next == nil || !sameCertificate(cert, k.next) || changed:
		// Its CA is in the caBundle from now on, as far as this replica
		// knows: a bundle it had to write again (a replica that read the
		// Secret just before the rotation wrote the one before) lacked it.
		k.next, k.nextSince = cert, now
	}
	if left := bundleSettle - now.Sub(k.nextSince); left > 0 {
		return left, nil
	}
	k.serving, k.next = cert, nil
	k.log.Infof("serving the webhook's renewed certificate from the Secret %s/%s", k.namespace, k.name)
	return refreshInterval, nil
}

// sameCertificate says whether a and b are the same leaf certificate.
func sameCertificate(a, b *tls.Certificate) bool {
	if a == nil || b == nil || len(a.Certificate) == 0 || len(b.Certificate) == 0 {
		return a == b
	}
	return bytes.Equal(a.Certificate[0], b.Certificate[0])
}
