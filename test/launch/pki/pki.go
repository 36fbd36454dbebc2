// Package pki is the certificate authority of a launched cluster: one CA,
// the leaf certificates the components need, and the service account key
// pair, all written as PEM files in one directory.
//
// The cluster uses real TLS everywhere, exactly as a production cluster
// would, so that authentication (client certificates), the Node authorizer
// and NodeRestriction behave as they do on a Plinth node. Keys are ECDSA
// P-256: generating one takes microseconds, where RSA-2048 takes tens of
// milliseconds each, and every component accepts them.
package pki

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
	"slices"
	"sync"
	"time"
)

// certLifetime is long enough for any test run and short enough that a
// leaked work directory does not hold credentials that matter for long.
const certLifetime = 7 * 24 * time.Hour

// KeyPair is a certificate with its private key, both also written as PEM.
type KeyPair struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertPath string
	KeyPath  string
}

// Identity describes a leaf certificate to issue.
type Identity struct {
	Name   string // file name stem in the PKI directory
	CN     string
	Orgs   []string
	Server bool // serving certificate (serverAuth) instead of a client one
	DNS    []string
	IPs    []net.IP
}

// PKI is the cluster's certificate authority and everything it issued.
type PKI struct {
	Dir string
	CA  *KeyPair
	// SAKeyPath and SAPubPath sign and verify service account tokens.
	SAKeyPath string
	SAPubPath string

	mu     sync.Mutex // guards issued: identities are issued while tests run
	issued map[string]*KeyPair
}

// New creates a CA in dir, issues a certificate for each of ids, and
// writes a service account key pair.
func New(dir string, ids []Identity) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki directory: %w", err)
	}
	p := &PKI{Dir: dir, issued: map[string]*KeyPair{}}
	ca, err := p.newCA()
	if err != nil {
		return nil, err
	}
	p.CA = ca
	for _, id := range ids {
		kp, err := p.issue(id)
		if err != nil {
			return nil, err
		}
		p.issued[id.Name] = kp
	}
	if err := p.newServiceAccountKey(); err != nil {
		return nil, err
	}
	return p, nil
}

// Issue issues one more certificate after New, for an identity known only
// later (a VM node joining a running control plane). A name already issued
// is refused: its files would be overwritten under a running component.
func (p *PKI) Issue(id Identity) (*KeyPair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.issued[id.Name]; ok {
		return nil, fmt.Errorf("issuing %s certificate: a certificate of that name exists", id.Name)
	}
	return p.issueLocked(id)
}

// Ensure is Issue for an identity that may have been issued already, by
// this caller or another: it returns the certificate of that name if
// there is one (issued for the same CN and groups, or it is an error),
// and issues it otherwise.
func (p *PKI) Ensure(id Identity) (*KeyPair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kp, ok := p.issued[id.Name]; ok {
		if kp.Cert.Subject.CommonName != id.CN || !slices.Equal(kp.Cert.Subject.Organization, id.Orgs) {
			return nil, fmt.Errorf("certificate %s exists for %s %v, not %s %v", id.Name, kp.Cert.Subject.CommonName, kp.Cert.Subject.Organization, id.CN, id.Orgs)
		}
		return kp, nil
	}
	return p.issueLocked(id)
}

func (p *PKI) issueLocked(id Identity) (*KeyPair, error) {
	kp, err := p.issue(id)
	if err != nil {
		return nil, err
	}
	p.issued[id.Name] = kp
	return kp, nil
}

// Get returns the certificate issued for the identity called name. The
// names are fixed in the caller's code, so an unknown one is a programming
// error: Get panics.
func (p *PKI) Get(name string) *KeyPair {
	p.mu.Lock()
	defer p.mu.Unlock()
	kp, ok := p.issued[name]
	if !ok {
		panic("pki: no certificate named " + name)
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

func (p *PKI) newCA() (*KeyPair, error) {
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

func (p *PKI) issue(id Identity) (*KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("issuing %s certificate: %w", id.Name, err)
	}
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("issuing %s certificate: %w", id.Name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: id.CN, Organization: id.Orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     id.DNS,
		IPAddresses:  id.IPs,
	}
	if id.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA.Cert, key.Public(), p.CA.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s certificate: %w", id.Name, err)
	}
	return p.write(id.Name, der, key)
}

// write stores a certificate and key as <name>.crt and <name>.key.
func (p *PKI) write(name string, der []byte, key *ecdsa.PrivateKey) (*KeyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding %s key: %w", name, err)
	}
	kp := &KeyPair{
		Cert:     cert,
		Key:      key,
		CertPath: filepath.Join(p.Dir, name+".crt"),
		KeyPath:  filepath.Join(p.Dir, name+".key"),
	}
	if err := writePEM(kp.CertPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	if err := writePEM(kp.KeyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return nil, err
	}
	return kp, nil
}

// newServiceAccountKey writes the key pair the apiserver signs service
// account tokens with (sa.key) and verifies them with (sa.pub).
func (p *PKI) newServiceAccountKey() error {
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
	p.SAKeyPath = filepath.Join(p.Dir, "sa.key")
	p.SAPubPath = filepath.Join(p.Dir, "sa.pub")
	if err := writePEM(p.SAKeyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(p.SAPubPath, "PUBLIC KEY", pubDER, 0o644)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// CertPEM returns the PEM encoding of the certificate, for kubeconfigs.
func (kp *KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Cert.Raw})
}

// KeyPEM returns the PEM encoding of the private key, for kubeconfigs.
func (kp *KeyPair) KeyPEM() ([]byte, error) {
	k, ok := kp.Key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("unexpected key type %T", kp.Key)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
