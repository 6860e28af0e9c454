package admin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/tests/harness"
)

// readToEOF reads c until the server closes it; a read that times out
// means the server left the connection open.
func readToEOF(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the connection was not closed by the server (read %q): %v", got, err)
	}
	return string(got)
}

// A web page can make a browser send an HTTP request to the admin port
// (cross-protocol scripting), which the inline protocol would read line by
// line, the body included. As Redis does, a command named POST or Host:
// closes the connection at once, and nothing after it runs: not the body,
// not commands pipelined in the same read, with or without a password.
func TestHTTPRequestClosesTheConnection(t *testing.T) {
	body := "CLUSTER MIGRATION IMPORT 0 100\r\n"
	post := fmt.Sprintf("POST /x HTTP/1.1\r\nHost: 127.0.0.1:7100\r\nUser-Agent: test\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for _, tc := range []struct {
		name string
		cfg  Config
		req  string
	}{
		{"POST", Config{}, post},
		{"post, with a password", Config{Password: "sekret"}, strings.Replace(post, "POST", "post", 1)},
		{"Host: first", Config{}, "Host: 127.0.0.1:7100\r\n\r\n" + body},
		{"HOST: after another line", Config{}, "PUT /x HTTP/1.1\r\nHOST: 127.0.0.1:7100\r\n\r\n" + body},
		{"POST in RESP, then a pipelined import", Config{}, "*1\r\n$4\r\nPOST\r\n*5\r\n$7\r\nCLUSTER\r\n$9\r\nMIGRATION\r\n$6\r\nIMPORT\r\n$1\r\n0\r\n$3\r\n100\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			var log harness.SyncBuffer
			s := serveLogged(t, tc.cfg, f, slog.New(slog.NewTextHandler(&log, nil)))
			c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			// Unanswered, as Redis: even the reply to PUT, read in the
			// same batch, is dropped.
			if got := readToEOF(t, c); got != "" {
				t.Errorf("the server answered %q", got)
			}
			if imports, _ := f.seen(); len(imports) != 0 {
				t.Fatalf("the request's body reached the manager: imports %q", imports)
			}
			if tasks, err := f.Status(""); err != nil || len(tasks) != 0 {
				t.Fatalf("tasks after the request: %v, %v", tasks, err)
			}
			// The port still serves everyone else.
			r := dialRaw(t, s.addr)
			if tc.cfg.Password != "" {
				r.do("AUTH", tc.cfg.Password)
			}
			if got := r.do("ECHO", "still here"); got != resp("still here") {
				t.Fatalf("ECHO on a new connection: %q", got)
			}
			if l := log.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "cross-protocol") {
				t.Errorf("no warning logged:\n%s", l)
			}
		})
	}
}

// selfSigned returns a certificate for 127.0.0.1, good for a server and a
// client, and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "slotmover admin test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// With Config.TLS the port speaks TLS only: a TLS client is answered, a
// plaintext one is closed unanswered; with ClientCAs required, a client
// without a certificate is refused.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	f := newFake()
	s := serve(t, Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}, f)

	c := client(t, s.addr, &redis.Options{TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if id, err := c.Do(ctx, "CLUSTER", "MIGRATION", "IMPORT", "0", "100").Text(); err != nil || id != "task01" {
		t.Fatalf("IMPORT over TLS: %q, %v", id, err)
	}
	if err := client(t, s.addr, nil).Ping(ctx).Err(); err == nil {
		t.Fatal("a plaintext client was answered")
	}
	raw, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	fmt.Fprint(raw, "*5\r\n$7\r\nCLUSTER\r\n$9\r\nMIGRATION\r\n$6\r\nIMPORT\r\n$3\r\n200\r\n$3\r\n300\r\n")
	if got := readToEOF(t, raw); got != "" {
		t.Fatalf("a plaintext command was answered %q", got)
	}
	if imports, _ := f.seen(); len(imports) != 1 {
		t.Fatalf("imports %q: the plaintext one reached the manager", imports)
	}

	mutual := serve(t, Config{TLS: &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}}, newFake())
	if err := client(t, mutual.addr, &redis.Options{TLSConfig: &tls.Config{RootCAs: pool}}).Ping(ctx).Err(); err == nil {
		t.Fatal("a client without a certificate was answered")
	}
	withCert := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	if err := client(t, mutual.addr, &redis.Options{TLSConfig: withCert}).Ping(ctx).Err(); err != nil {
		t.Fatalf("a client with a trusted certificate: %v", err)
	}
}
