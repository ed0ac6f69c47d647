package rlscore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// certReloadInterval bounds how often the client certificate files are checked for a rotation.
const certReloadInterval = time.Minute

func loadCAPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// clientCertificate serves the plugin's client certificate for mutual TLS, re-read from its files
// at most once a minute; a rotation that fails to load keeps the previous pair.
type clientCertificate struct {
	certFile, keyFile string

	mu      sync.Mutex
	current *tls.Certificate
	checked time.Time
	stamp   string
}

func (c *clientCertificate) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && time.Since(c.checked) < certReloadInterval {
		return c.current, nil
	}
	c.checked = time.Now()
	stamp := fileStamp(c.certFile) + "|" + fileStamp(c.keyFile)
	if c.current != nil && stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		if c.current != nil {
			return c.current, nil
		}
		return nil, err
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}

func fileStamp(path string) string {
	info, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d-%d", info.ModTime().UnixNano(), info.Size())
}

// tlsConfig is the client side of TLS from validated args (nil: the defaults).
func tlsConfig(args *RLScoreArgs) *tls.Config {
	if args.TLSCAFile == "" && args.TLSCertFile == "" {
		return nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if args.TLSCAFile != "" {
		pool, err := loadCAPool(args.TLSCAFile)
		if err == nil { // CheckFiles already read it; a file gone since then leaves the system roots
			config.RootCAs = pool
		}
	}
	if args.TLSCertFile != "" {
		cert := &clientCertificate{certFile: args.TLSCertFile, keyFile: args.TLSKeyFile}
		config.GetClientCertificate = cert.get
	}
	return config
}
