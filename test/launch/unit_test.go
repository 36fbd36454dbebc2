package launch

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, []identity{
		{name: "server", cn: "kube-apiserver", server: true, dns: []string{"kubernetes"}, ips: []net.IP{net.IPv4(127, 0, 0, 1)}},
		{name: "client", cn: "system:node:n1", orgs: []string{"system:nodes"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.cert)
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
	client := p.get("client").cert
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verifies for serverAuth")
	}
	if got := client.Subject.Organization; len(got) != 1 || got[0] != "system:nodes" {
		t.Errorf("client organizations = %v", got)
	}
	if info, err := os.Stat(p.get("client").keyPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("client key mode = %v, %v; want 0600", info.Mode(), err)
	}
	for _, f := range []string{p.saKeyPath, p.saPubPath} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if block, _ := pem.Decode(data); block == nil {
			t.Errorf("%s is not PEM", f)
		}
	}
}

func TestPPID(t *testing.T) {
	if got, want := ppid(os.Getpid()), os.Getppid(); got != want {
		t.Errorf("ppid(self) = %d, want %d", got, want)
	}
}

func TestPrepareDirRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "precious")
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := prepareDir(dir, hostOwned)
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("prepareDir on a foreign directory = %v, want a refusal", err)
	}
	if data, err := os.ReadFile(precious); err != nil || string(data) != "keep me" {
		t.Fatalf("foreign file damaged: %q, %v", data, err)
	}
}

// hostOwned is a baseline in which all host-wide state predates the test,
// so a sweep touches nothing outside the test's directory (a cluster may be
// running on this host while unit tests run).
var hostOwned = baseline{Kubepods: true, KubeletDir: true, BridgeExists: true, RunContainerd: true}

func TestPrepareDirWipesOldWorkDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := prepareDir(dir, hostOwned); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old-state")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(dir, hostOwned); err != nil {
		t.Fatalf("preparing an old work directory again: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old state survived: %v", err)
	}
}

func TestBusyErrorNamesTheOtherCluster(t *testing.T) {
	err := (&BusyError{PID: 42, Dir: "/tmp/plinth-run"}).Error()
	for _, want := range []string{"already running", "42", "/tmp/plinth-run"} {
		if !strings.Contains(err, want) {
			t.Errorf("BusyError %q lacks %q", err, want)
		}
	}
}
