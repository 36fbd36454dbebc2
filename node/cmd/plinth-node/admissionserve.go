package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	plinthk8s "source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/node/kubernetes/placement"
	"source.plinth.dev/node/kubernetes/snapshotapi"
	"source.plinth.dev/pkg/logtree"
)

const admissionServeUsage = `Usage: plinth-node admission-serve (--tls-cert-file FILE --tls-key-file FILE | --certificate-secret NS/NAME --certificate-dns-name NAME) [flags]

Serves the admission webhook that lets a node agent create a PV only for
a claim placed on its node, and capacity objects only for its own host
and Plinth's classes (package node/kubernetes/admission), for the
control plane to call over HTTPS at ` + clusterobjects.WebhookPath + `;
and the one that labels each claim of Plinth's with the node it is
placed on, at ` + clusterobjects.ClaimLabelsPath + ` (and /healthz for probes).
Register them with the ValidatingWebhookConfiguration
` + clusterobjects.WebhookName + ` (clusterobjects.NodeWritesWebhook) and the
MutatingWebhookConfiguration ` + clusterobjects.ClaimLabelsWebhookName + `
(clusterobjects.ClaimLabelsWebhook), and give its identity the ClusterRole
` + clusterobjects.AdmissionRoleName + `. It also labels, at start and every ten
minutes, the claims written while the labels were not registered (an
upgrade). And it places the claims of Plinth's StorageClasses that bind
immediately on a node (package node/kubernetes/placement): one replica
at a time, elected with the Lease ` + clusterobjects.PlacerLeaseName + ` in
--lease-namespace.

The serving certificate comes from files (read again whenever they
change), or, without a certificate manager (deploy/), from a Secret the
webhook keeps itself: a CA and a certificate for --certificate-dns-name
(the Service's name, <service>.<namespace>.svc), made by the first replica
to start and replaced when it ends within a year; the webhook then puts
the CA into the configurations' caBundle. Every minute it reads the
Secret again and puts its CAs back into the caBundle if they were
removed; a renewed certificate (delete the Secret to rotate the CA) is
served once its CA has been trusted for a few seconds, the previous CA
staying in the caBundle beside it, so the replicas move over one by one
without a refusal.

Flags:
`

type admissionServeOptions struct {
	listen, certFile, keyFile, kubeconfig string
	// secretNamespace, secretName and dnsName: the certificate kept in a
	// Secret (--certificate-secret, --certificate-dns-name).
	secretNamespace, secretName, dnsName string
	// leaseNamespace holds the placer's Lease.
	leaseNamespace string
}

func parseAdmissionServeOptions(args []string) (*admissionServeOptions, error) {
	o := &admissionServeOptions{}
	fs := flag.NewFlagSet("plinth-node admission-serve", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", ":9443", "address to serve HTTPS on, host:port")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM), issued by the CA in the webhook configuration's caBundle (required)")
	fs.StringVar(&o.keyFile, "tls-key-file", "", "private key of --tls-cert-file (PEM) (required)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the identity that reads claims; empty: the pod's service account")
	secret := fs.String("certificate-secret", "", "NAMESPACE/NAME of the Secret that keeps the webhook's own CA and certificate, instead of --tls-cert-file")
	fs.StringVar(&o.dnsName, "certificate-dns-name", "", "the name the API server calls the webhook by, <service>.<namespace>.svc, for --certificate-secret")
	fs.StringVar(&o.leaseNamespace, "lease-namespace", "", "namespace of the Lease the replicas elect the placer with; empty: the --certificate-secret's, or kube-system")
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
	files := o.certFile != "" || o.keyFile != ""
	switch {
	case files && *secret != "":
		return nil, errors.New("--tls-cert-file and --certificate-secret exclude each other")
	case *secret != "":
		ns, name, ok := strings.Cut(*secret, "/")
		if !ok || ns == "" || name == "" || o.dnsName == "" {
			return nil, errors.New("--certificate-secret takes NAMESPACE/NAME, and needs --certificate-dns-name")
		}
		o.secretNamespace, o.secretName = ns, name
		o.leaseNamespace = cmp.Or(o.leaseNamespace, ns)
	case o.certFile == "" || o.keyFile == "":
		return nil, errors.New("--tls-cert-file and --tls-key-file, or --certificate-secret, are required: the API server calls webhooks over HTTPS only")
	}
	o.leaseNamespace = cmp.Or(o.leaseNamespace, metav1.NamespaceSystem)
	return o, nil
}

// admissionServe runs the admission webhook (`plinth-node admission-serve`)
// until ctx ends.
func admissionServe(ctx context.Context, args []string) error {
	o, err := parseAdmissionServeOptions(args)
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
	logs := logtree.New(logtree.WithSink(os.Stderr))
	log := logs.LeveledFor("admission")
	w, err := admission.New(client, log)
	if err != nil {
		return err
	}
	var cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	var keeper *admission.SecretKeeper // a certificate kept in a Secret
	if o.secretName == "" {
		if cert, err = admission.CertificateFiles(o.certFile, o.keyFile); err != nil {
			return err
		}
	} else {
		if keeper, err = admission.NewSecretKeeper(ctx, client, o.secretNamespace, o.secretName, o.dnsName, log); err != nil {
			return err
		}
		cert = keeper.GetCertificate
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if keeper != nil {
		go keeper.Run(ctx)
	}
	go admission.KeepBackfilled(ctx, client, log, admission.BackfillInterval)
	// The placer's Lease has a client of its own: its own rate limit.
	leaseClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client of the placer's Lease: %w", err)
	}
	snapshots, err := snapshotapi.NewClient(cfg)
	if err != nil {
		return err
	}
	placer, err := placement.New(placement.Config{Client: client, Snapshots: snapshots, LeaseClient: leaseClient, Driver: names.DriverName, LeaseNamespace: o.leaseNamespace,
		LeaseName: clusterobjects.PlacerLeaseName, Identity: placement.Identity(), Log: logs.LeveledFor("placement")})
	if err != nil {
		return err
	}
	go func() {
		if err := placer.Run(ctx); err != nil {
			log.Errorf("the placer stopped: %v", err)
		}
	}()
	log.Infof("serving the admission webhook on https://%[1]s%[2]s, and its claim labels on https://%[1]s%[3]s", l.Addr(), clusterobjects.WebhookPath, clusterobjects.ClaimLabelsPath)
	return admission.Serve(ctx, l, cert, w)
}
