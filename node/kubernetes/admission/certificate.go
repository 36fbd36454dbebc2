package admission

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// CertificateFiles serves the certificate and key in certFile and keyFile
// (PEM), read again once either file changes (a renewed certificate is
// used from the next connection, without a restart). The files are read
// once now, so that a wrong path or a mismatched pair fails at start; a
// renewal that cannot be loaded (say, caught half-written) keeps the last
// good pair, and the files are tried again on the next connection.
func CertificateFiles(certFile, keyFile string) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	f := &certificateFiles{cert: certFile, key: keyFile}
	if _, err := f.get(nil); err != nil {
		return nil, err
	}
	return f.get, nil
}

type certificateFiles struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]time.Time
}

func (f *certificateFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var stamp [2]time.Time
	for i, path := range []string{f.cert, f.key} {
		st, err := os.Stat(path)
		if err != nil {
			return f.last(fmt.Errorf("serving certificate: %w", err))
		}
		stamp[i] = st.ModTime()
	}
	if f.current != nil && stamp == f.stamp {
		return f.current, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return f.last(fmt.Errorf("loading serving certificate %s and key %s: %w", f.cert, f.key, err))
	}
	f.current, f.stamp = &pair, stamp
	return f.current, nil
}

// last is the pair loaded before, if any, when reading the files failed.
func (f *certificateFiles) last(err error) (*tls.Certificate, error) {
	if f.current != nil {
		return f.current, nil
	}
	return nil, err
}
