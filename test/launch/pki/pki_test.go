package pki_test

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"

	"source.plinth.dev/test/launch/pki"
)

func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := pki.New(dir, []pki.Identity{
		{Name: "server", CN: "kube-apiserver", Server: true, DNS: []string{"kubernetes"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}},
		{Name: "client", CN: "system:node:n1", Orgs: []string{"system:nodes"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CA.Cert)
	for _, tc := range []struct {
		name  string
		usage x509.ExtKeyUsage
		host  string
	}{
		{"server", x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{"server", x509.ExtKeyUsageServerAuth, "kubernetes"},
		{"client", x509.ExtKeyUsageClientAuth, ""},
	} {
		data, err := os.ReadFile(filepath.Join(dir, tc.name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(data)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}, DNSName: tc.host}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s (host %q): does not verify: %v", tc.name, tc.host, err)
		}
	}
	// A client certificate must not serve, and the groups must be there
	// for RBAC and the Node authorizer.
	client := p.Get("client").Cert
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verifies for serverAuth")
	}
	if got := client.Subject.Organization; len(got) != 1 || got[0] != "system:nodes" {
		t.Errorf("client organizations = %v", got)
	}
	if info, err := os.Stat(p.Get("client").KeyPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("client key mode = %v, %v; want 0600", info.Mode(), err)
	}
	for _, f := range []string{p.SAKeyPath, p.SAPubPath} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if block, _ := pem.Decode(data); block == nil {
			t.Errorf("%s is not PEM", f)
		}
	}
}

// Ensure issues an identity once, whoever asks and however often, and
// refuses a second identity under the same name.
func TestEnsure(t *testing.T) {
	p, err := pki.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	id := pki.Identity{Name: "agent-a", CN: "system:plinth-node:a", Orgs: []string{"plinth:nodes"}}
	got := make(chan *pki.KeyPair, 8)
	for range 8 {
		go func() {
			kp, err := p.Ensure(id)
			if err != nil {
				t.Error(err)
			}
			got <- kp
		}()
	}
	first := <-got
	for range 7 {
		if kp := <-got; kp != first {
			t.Error("Ensure of one identity from parallel callers issued more than one certificate")
		}
	}
	if first == nil || first.Cert.Subject.CommonName != id.CN {
		t.Fatalf("Ensure issued %v, want CN %s", first, id.CN)
	}
	if _, err := p.Ensure(pki.Identity{Name: "agent-a", CN: "system:plinth-node:b", Orgs: id.Orgs}); err == nil {
		t.Error("Ensure of another CN under an issued name: no error")
	}
	if _, err := p.Issue(id); err == nil {
		t.Error("Issue of a name Ensure issued: no error")
	}
}
