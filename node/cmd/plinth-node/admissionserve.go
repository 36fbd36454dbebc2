package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/kubernetes"

	plinthk8s "source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/pkg/logtree"
)

const admissionServeUsage = `Usage: plinth-node admission-serve --tls-cert-file FILE --tls-key-file FILE [flags]

Serves the admission webhook that lets a node agent create a PV only for
a claim placed on its node (package node/kubernetes/admission), for the
control plane to call over HTTPS at ` + clusterobjects.VolumeClaimsWebhookPath + `
(and /healthz for probes). Register it with the ValidatingWebhookConfiguration
` + clusterobjects.VolumeClaimsWebhookName + ` (clusterobjects.VolumeClaimsWebhook), and
give its identity the ClusterRole ` + clusterobjects.AdmissionRoleName + ` (get on claims).
The serving certificate is read again whenever its files change.

Flags:
`

type admissionServeOptions struct {
	listen, certFile, keyFile, kubeconfig string
}

func parseAdmissionServeOptions(args []string) (*admissionServeOptions, error) {
	o := &admissionServeOptions{}
	fs := flag.NewFlagSet("plinth-node admission-serve", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", ":9443", "address to serve HTTPS on, host:port")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM), issued by the CA in the webhook configuration's caBundle (required)")
	fs.StringVar(&o.keyFile, "tls-key-file", "", "private key of --tls-cert-file (PEM) (required)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the identity that reads claims; empty: the pod's service account")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), admissionServeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.certFile == "" || o.keyFile == "" {
		return nil, errors.New("--tls-cert-file and --tls-key-file are required: the API server calls webhooks over HTTPS only")
	}
	return o, nil
}

// admissionServe runs the admission webhook (`plinth-node admission-serve`)
// until ctx ends.
func admissionServe(ctx context.Context, args []string) error {
	o, err := parseAdmissionServeOptions(args)
	if err != nil {
		return err
	}
	cert, err := admission.CertificateFiles(o.certFile, o.keyFile)
	if err != nil {
		return err
	}
	cfg, err := plinthk8s.ClientConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	admission.ConfigureClient(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	log := logtree.New(logtree.WithSink(os.Stderr)).LeveledFor("admission")
	w, err := admission.New(client, log)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	log.Infof("serving the admission webhook on https://%s%s", l.Addr(), clusterobjects.VolumeClaimsWebhookPath)
	return admission.Serve(ctx, l, cert, w)
}
