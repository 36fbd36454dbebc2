package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/test/launch/pki"
)

// servingCert issues a serving certificate for 127.0.0.1 from a new CA
// (test/launch's pki) and moves it and its key to dir/tls.crt and
// dir/tls.key, as a certificate manager renews them. It returns the CA
// and the certificate.
func servingCert(t *testing.T, dir string) (ca, cert *x509.Certificate) {
	t.Helper()
	p, err := pki.New(t.TempDir(), []pki.Identity{{Name: "serving", CN: "plinth-admission", Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}})
	if err != nil {
		t.Fatal(err)
	}
	kp := p.Get("serving")
	for from, to := range map[string]string{kp.CertPath: "tls.crt", kp.KeyPath: "tls.key"} {
		if err := os.Rename(from, filepath.Join(dir, to)); err != nil {
			t.Fatal(err)
		}
	}
	return p.CA.Cert, kp.Cert
}

// TestAdmissionServe runs `plinth-node admission-serve` as the control
// plane would: over TLS with the given certificate, answering reviews.
// Its API server is unreachable here, so a node agent's PV is refused as
// unavailable (never let through); the decisions against a real API
// server are clusterobjects' TestNodeWritesOwnOnly.
func TestAdmissionServe(t *testing.T) {
	dir := t.TempDir()
	firstCA, _ := servingCert(t, dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "admission-serve", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig,
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"))
	n.waitLine(t, clusterobjects.WebhookPath)
	// The serving line's address: other lines name the (unreachable) API
	// server's, https://127.0.0.1:1, in an order no one promises.
	addr := regexp.MustCompile(`serving the admission webhook on https://(127\.0\.0\.1:[0-9]+)/`).FindStringSubmatch(n.output())
	if addr == nil {
		t.Fatalf("no address in the log:\n%s", n.output())
	}
	// client trusts cert alone, on new connections only, and reports the
	// certificate the server presented.
	client := func(cert *x509.Certificate) (*http.Client, *[]*x509.Certificate) {
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		var seen []*x509.Certificate
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
				seen = cs.PeerCertificates
				return nil
			}},
		}}, &seen
	}
	c, _ := client(firstCA)
	resp, err := c.Get("https://" + addr[1] + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	resp.Body.Close()

	review := func(c *http.Client, user authenticationv1.UserInfo) *admissionv1.AdmissionResponse {
		t.Helper()
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u-1"}}
		raw, err := json.Marshal(admission.Probe("a", claim))
		if err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "r-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"},
				Operation: admissionv1.Create, UserInfo: user, Object: runtime.RawExtension{Raw: raw}},
		})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Post("https://"+addr[1]+clusterobjects.WebhookPath, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil || out.Response.UID != "r-1" {
			t.Fatalf("answer %d: %+v (%v)", resp.StatusCode, out, err)
		}
		return out.Response
	}
	agent := authenticationv1.UserInfo{Username: clusterobjects.NodeAgentUser("a"), Groups: []string{clusterobjects.NodeAgentGroup}}
	if r := review(c, agent); r.Allowed || r.Result.Code != http.StatusServiceUnavailable || !strings.Contains(r.Result.Message, "cannot check the claim ns/c") {
		t.Errorf("a node agent's PV with the API server unreachable: %+v, want refused as unavailable", r.Result)
	}
	if r := review(c, authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters"}}); !r.Allowed {
		t.Errorf("an administrator's PV: refused (%+v), want allowed", r.Result)
	}

	// A renewed certificate is served from the next connection on.
	time.Sleep(10 * time.Millisecond) // a later modification time on coarse clocks
	secondCA, second := servingCert(t, dir)
	c2, seen := client(secondCA)
	if r := review(c2, authenticationv1.UserInfo{Username: "admin"}); !r.Allowed {
		t.Errorf("after the renewal: refused (%+v)", r.Result)
	}
	if len(*seen) == 0 || (*seen)[0].SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Errorf("after the renewal the server presented %v, want serial %v", *seen, second.SerialNumber)
	}

	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.wait(t); err != nil {
		t.Errorf("admission-serve after SIGTERM: %v\n%s", err, n.output())
	}
}
