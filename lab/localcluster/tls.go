package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// pemPair is a certificate and its key, PEM-encoded.
type pemPair struct{ cert, key []byte }

// testCert is one self-signed certificate for 127.0.0.1, shared by every
// TLS server of the process; clients trust it as their only root.
var testCert = sync.OnceValues(func() (pemPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pemPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "slotmover test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return pemPair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return pemPair{}, err
	}
	return pemPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
})

// WriteTestCert writes the test certificate, for 127.0.0.1, into dir as
// cert.pem and its key as key.pem, and returns their paths and a pool
// that trusts it.
func WriteTestCert(dir string) (cert, key string, pool *x509.CertPool, err error) {
	pair, err := testCert()
	if err != nil {
		return "", "", nil, fmt.Errorf("make a test certificate: %w", err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pair.cert, 0o644); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(key, pair.key, 0o600); err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(pair.cert)
	return cert, key, pool, nil
}

// tlsSetup writes the certificate into dir and returns the server's TLS
// directives for port and the client configuration that trusts it.
func tlsSetup(dir string, port int) ([]string, *tls.Config, error) {
	cert, key, pool, err := WriteTestCert(dir)
	if err != nil {
		return nil, nil, err
	}
	conf := []string{
		"port 0",
		fmt.Sprintf("tls-port %d", port),
		"tls-cert-file " + cert,
		"tls-key-file " + key,
		"tls-ca-cert-file " + cert,
		"tls-auth-clients no",
		"tls-cluster yes",
		"tls-replication yes",
	}
	return conf, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
