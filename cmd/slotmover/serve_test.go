package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slotmover/slotmover/internal/config"
	"github.com/slotmover/slotmover/internal/localcluster"
)

// syncBuffer is a log destination safe for serve's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// natsServer runs an embedded NATS server on 127.0.0.1:port (0: a free
// one) that asks for auth's credentials; it is shut down at cleanup.
func natsServer(t *testing.T, port int, storeDir string, auth func(*server.Options)) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	opts := &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir, NoLog: true, NoSigs: true}
	auth(opts)
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	return ns
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "slotmover serve test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "admin.pem"), filepath.Join(dir, "admin-key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(leaf)
	return cert, key, pool
}

func adminClient(addr string, tlsConf *tls.Config) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, TLSConfig: tlsConf, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// serve never logs the credentials of a NATS URL, a token's
// (nats://token@host, which url.URL.Redacted would show) nor a password,
// not at the start and not when NATS comes back; and it serves the admin
// port over TLS when given a certificate.
func TestServeHidesNATSCredentialsAndServesAdminTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cl, err := localcluster.StartCluster(ctx, dir, []string{"0-16383"}, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	cert, key, pool := selfSigned(t, dir)

	for _, tc := range []struct {
		name, secret string
		auth         func(*server.Options)
		url          func(port int) string
	}{
		{"token", "t0ken-s3cret", func(o *server.Options) { o.Authorization = "t0ken-s3cret" },
			func(port int) string { return fmt.Sprintf("nats://t0ken-s3cret@127.0.0.1:%d", port) }},
		{"user and password", "pa55-s3cret", func(o *server.Options) { o.Username, o.Password = "sidecar", "pa55-s3cret" },
			func(port int) string { return fmt.Sprintf("nats://sidecar:pa55-s3cret@127.0.0.1:%d", port) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := t.TempDir()
			ns := natsServer(t, 0, store, tc.auth)
			port := ns.Addr().(*net.TCPAddr).Port
			c, err := config.Load([]string{"--node", cl.Nodes[0].Addr, "--admin", "127.0.0.1:0", "--metrics", "", "--state-dir", t.TempDir(),
				"--nats", tc.url(port), "--admin-tls-cert", cert, "--admin-tls-key", key, "--log-level", "debug"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var logBuf syncBuffer
			log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			sctx, stop := context.WithCancel(ctx)
			defer stop()
			ready := make(chan string, 1)
			done := make(chan error, 1)
			go func() { done <- serve(sctx, c, log, func(admin, _ string) { ready <- admin }) }()
			var adminAddr string
			select {
			case adminAddr = <-ready:
			case err := <-done:
				t.Fatalf("serve: %v\n%s", err, logBuf.String())
			case <-time.After(20 * time.Second):
				t.Fatalf("serve not ready:\n%s", logBuf.String())
			}

			tlsClient := adminClient(adminAddr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
			defer tlsClient.Close()
			if err := tlsClient.Ping(ctx).Err(); err != nil {
				t.Errorf("PING over TLS: %v", err)
			}
			plain := adminClient(adminAddr, nil)
			defer plain.Close()
			if err := plain.Ping(ctx).Err(); err == nil {
				t.Error("a plaintext client was answered")
			}

			// NATS goes away and comes back on the same port: the
			// client reconnects and serve logs where to.
			ns.Shutdown()
			ns.WaitForShutdown()
			natsServer(t, port, store, tc.auth)
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(logBuf.String(), "NATS reconnected") {
				if time.Now().After(deadline) {
					t.Fatalf("no reconnection logged:\n%s", logBuf.String())
				}
				time.Sleep(50 * time.Millisecond)
			}

			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not return")
			}
			out := logBuf.String()
			if strings.Contains(out, tc.secret) {
				t.Fatalf("the log shows the NATS credentials:\n%s", out)
			}
			if want := fmt.Sprintf("xxxxx@127.0.0.1:%d", port); strings.Count(out, want) < 2 || !strings.Contains(out, "admin_tls=true") {
				t.Fatalf("the log does not name the NATS server (%s) at start and reconnection, or the admin port's TLS:\n%s", want, out)
			}
		})
	}
}

// connectNATS's errors hide the credentials of the URLs they name, one
// nats.go could not parse included.
func TestConnectNATSErrorsHideCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, server := range []string{
		"nats://sidecar:hunter2@" + closed,
		"nats://hunter2@" + closed,
		"nats://sidecar:hunter2 x@" + closed,
	} {
		nc, err := connectNATS(config.NATS{Servers: []string{server}}, "test", slog.New(slog.DiscardHandler))
		if err == nil {
			nc.Close()
			t.Fatalf("%q: connected", server)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the secret: %v", server, err)
		}
	}
}

// An admin port off loopback without a password refuses the start, as
// other configuration errors do, before anything is reached.
func TestServeRefusesAnOpenAdminPortWithoutPassword(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if code := serveCmd([]string{"--node", "127.0.0.1:1", "--admin", listen, "--metrics", ""}); code != exitRefused {
			t.Errorf("--admin %s without a password: exit %d, want %d", listen, code, exitRefused)
		}
	}
}
