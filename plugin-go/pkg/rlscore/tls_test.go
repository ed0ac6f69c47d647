package rlscore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
)

// testCA issues real certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // path of the CA certificate
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	path := filepath.Join(t.TempDir(), "ca.crt")
	writePEM(t, path, "CERTIFICATE", der)
	return &testCA{cert: cert, key: key, pem: path}
}

// issue returns the paths of a certificate and key signed by the CA.
func (ca *testCA) issue(t *testing.T, name string, server bool) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyDER, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, filepath.Join(dir, "tls.crt"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, "tls.key"), "EC PRIVATE KEY", keyDER)
	return filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsServer answers /v1/scores over HTTPS with the CA's server certificate; clientCA, when set,
// requires client certificates it signed.
func tlsServer(t *testing.T, ca *testCA, clientCA *testCA) *httptest.Server {
	t.Helper()
	certFile, keyFile := ca.issue(t, "rlscore-suggestion-server", true)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(compact(headers("EE", "model", `[]`), []byte{100, 0, 37}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		srv.TLS.ClientCAs, srv.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestTLS(t *testing.T) {
	ca, stranger := newTestCA(t, "rlscore CA"), newTestCA(t, "stranger CA")
	clientCert, clientKey := ca.issue(t, "rl-scheduler", false)
	strangerCert, strangerKey := stranger.issue(t, "intruder", false)
	scored := map[string]int64{"node-a": 100, "node-b": 0, "node-c": 37}
	tests := []struct {
		name       string
		mutual     bool
		args       RLScoreArgs
		want       map[string]int64
		wantReason string
	}{
		{name: "server certificate from the configured CA", args: RLScoreArgs{TLSCAFile: ca.pem}, want: scored},
		{name: "wrong CA fails closed", args: RLScoreArgs{TLSCAFile: stranger.pem}, want: neutral(testNodes...), wantReason: ReasonTLS},
		{name: "system roots do not know a private CA", args: RLScoreArgs{}, want: neutral(testNodes...), wantReason: ReasonTLS},
		{name: "mutual TLS with a client certificate", mutual: true,
			args: RLScoreArgs{TLSCAFile: ca.pem, TLSCertFile: clientCert, TLSKeyFile: clientKey}, want: scored},
		{name: "mutual TLS without a client certificate", mutual: true, args: RLScoreArgs{TLSCAFile: ca.pem},
			want: neutral(testNodes...), wantReason: ReasonTLS},
		{name: "mutual TLS with a certificate from another CA", mutual: true,
			args: RLScoreArgs{TLSCAFile: ca.pem, TLSCertFile: strangerCert, TLSKeyFile: strangerKey},
			want: neutral(testNodes...), wantReason: ReasonTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clientCA *testCA
			if tt.mutual {
				clientCA = ca
			}
			srv := tlsServer(t, ca, clientCA)
			args := tt.args
			args.SuggestionURL = srv.URL + "/suggest"
			var before float64
			if tt.wantReason != "" {
				before, _ = testutil.GetCounterMetricValue(suggestFailures.WithLabelValues(tt.wantReason))
			}
			got := runPlugin(t, newTestPlugin(t, args), testPod(nil), testNodes...)
			for node, want := range tt.want {
				if got[node] != want {
					t.Errorf("node %s: got %d, want %d", node, got[node], want)
				}
			}
			if tt.wantReason != "" {
				after, _ := testutil.GetCounterMetricValue(suggestFailures.WithLabelValues(tt.wantReason))
				if after != before+1 {
					t.Errorf("failures{reason=%s}: got %v, want %v", tt.wantReason, after, before+1)
				}
			}
		})
	}
}

func TestTLSArgs(t *testing.T) {
	ca := newTestCA(t, "rlscore CA")
	cert, key := ca.issue(t, "rl-scheduler", false)
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	_ = os.WriteFile(notPEM, []byte("hello"), 0o600)
	tests := []struct {
		args    RLScoreArgs
		wantErr string
	}{
		{RLScoreArgs{SuggestionURL: "https://s/suggest", TLSCAFile: ca.pem, TLSCertFile: cert, TLSKeyFile: key}, ""},
		{RLScoreArgs{SuggestionURL: "http://s/suggest", TLSCAFile: ca.pem}, "need an https URL"},
		{RLScoreArgs{SuggestionURL: "https://s/suggest", TLSCAFile: "/nonexistent/ca.crt"}, "tlsCAFile"},
		{RLScoreArgs{SuggestionURL: "https://s/suggest", TLSCAFile: notPEM}, "holds no PEM certificate"},
		{RLScoreArgs{SuggestionURL: "https://s/suggest", TLSCertFile: cert}, "set both or neither"},
		{RLScoreArgs{SuggestionURL: "https://s/suggest", TLSCertFile: cert, TLSKeyFile: ca.pem}, "tlsCertFile/tlsKeyFile"},
	}
	for _, tt := range tests {
		args, err := DecodeArgs(&tt.args)
		if err == nil {
			err = CheckFiles(args)
		}
		if tt.wantErr == "" && err != nil {
			t.Errorf("%+v: unexpected error %v", tt.args, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%+v: want error containing %q, got %v", tt.args, tt.wantErr, err)
		}
	}
}
