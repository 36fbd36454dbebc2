package launch

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The cluster uses real TLS everywhere, exactly as a production cluster
// would, so that authentication (client certificates), the Node authorizer
// and NodeRestriction behave as they do on a Plinth node. Keys are ECDSA
// P-256: generating one takes microseconds, where RSA-2048 takes tens of
// milliseconds each, and every component accepts them.

// certLifetime is long enough for any test run and short enough that a
// leaked work directory does not hold credentials that matter for long.
const certLifetime = 7 * 24 * time.Hour

// keyPair is a certificate with its private key, both also written as PEM.
type keyPair struct {
	cert     *x509.Certificate
	key      crypto.Signer
	certPath string
	keyPath  string
}

// identity describes a leaf certificate to issue.
type identity struct {
	name   string // file name stem under pki/
	cn     string
	orgs   []string
	server bool // serving certificate (serverAuth) instead of a client one
	dns    []string
	ips    []net.IP
}

// pki is the cluster's certificate authority and everything it issued.
type pki struct {
	dir string
	ca  *keyPair
	// saKeyPath/saPubPath sign and verify service account tokens.
	saKeyPath string
	saPubPath string
	issued    map[string]*keyPair
}

func newPKI(dir string, ids []identity) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki directory: %w", err)
	}
	p := &pki{dir: dir, issued: map[string]*keyPair{}}
	ca, err := p.newCA()
	if err != nil {
		return nil, err
	}
	p.ca = ca
	for _, id := range ids {
		kp, err := p.issue(id)
		if err != nil {
			return nil, err
		}
		p.issued[id.name] = kp
	}
	if err := p.newServiceAccountKey(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) get(name string) *keyPair {
	kp, ok := p.issued[name]
	if !ok {
		panic("launch: no certificate named " + name) // a programming error in this package
	}
	return kp
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	return k, nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return n, nil
}

func (p *pki) newCA() (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "plinth-launch-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	return p.write("ca", der, key)
}

func (p *pki) issue(id identity) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("issuing %s certificate: %w", id.name, err)
	}
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("issuing %s certificate: %w", id.name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: id.cn, Organization: id.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     id.dns,
		IPAddresses:  id.ips,
	}
	if id.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.cert, key.Public(), p.ca.key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s certificate: %w", id.name, err)
	}
	return p.write(id.name, der, key)
}

// write stores a certificate and key as <name>.crt and <name>.key.
func (p *pki) write(name string, der []byte, key *ecdsa.PrivateKey) (*keyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding %s key: %w", name, err)
	}
	kp := &keyPair{
		cert:     cert,
		key:      key,
		certPath: filepath.Join(p.dir, name+".crt"),
		keyPath:  filepath.Join(p.dir, name+".key"),
	}
	if err := writePEM(kp.certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	if err := writePEM(kp.keyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return nil, err
	}
	return kp, nil
}

// newServiceAccountKey writes the key pair the apiserver signs service
// account tokens with (sa.key) and verifies them with (sa.pub).
func (p *pki) newServiceAccountKey() error {
	key, err := newKey()
	if err != nil {
		return fmt.Errorf("creating service account key: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding service account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("encoding service account public key: %w", err)
	}
	p.saKeyPath = filepath.Join(p.dir, "sa.key")
	p.saPubPath = filepath.Join(p.dir, "sa.pub")
	if err := writePEM(p.saKeyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(p.saPubPath, "PUBLIC KEY", pubDER, 0o644)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// pemBytes returns the PEM encoding of a certificate, for kubeconfigs.
func (kp *keyPair) certPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw})
}

func (kp *keyPair) keyPEM() ([]byte, error) {
	k, ok := kp.key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("unexpected key type %T", kp.key)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
