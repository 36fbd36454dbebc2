package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"source.plinth.dev/node/kubernetes/clusterobjects"
)

// shutdownGrace is how long reviews in flight get to finish when Serve
// stops: longer than the API server waits for one.
const shutdownGrace = 6 * time.Second

// Serve serves w over TLS on l (the API server calls webhooks over HTTPS
// only) until ctx ends: the reviews of node agents' creations at
// clusterobjects.WebhookPath, those of claims' labels at
// clusterobjects.ClaimLabelsPath, and /healthz for probes. cert returns the serving certificate, read
// again for each connection so that a renewed one is used at once.
func Serve(ctx context.Context, l net.Listener, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error), w *Webhook) error {
	if cert == nil || w == nil {
		return errors.New("admission: Serve needs a certificate and a webhook")
	}
	mux := http.NewServeMux()
	mux.Handle(clusterobjects.WebhookPath, w)
	mux.Handle(clusterobjects.ClaimLabelsPath, w.Labels())
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok")) })
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-done:
		return fmt.Errorf("serving the admission webhook: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("stopping the admission webhook: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the admission webhook: %w", err)
	}
	return nil
}
