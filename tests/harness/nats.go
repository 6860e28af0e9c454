package harness

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS runs an embedded NATS server with JetStream for a test, on a free
// loopback port, and returns its URL; it is shut down at cleanup.
func NATS(t testing.TB) string {
	t.Helper()
	return NATSServer(t, 0, t.TempDir(), nil).ClientURL()
}

// NATSServer runs an embedded NATS server with JetStream on
// 127.0.0.1:port (0: a free one), keeping its streams in storeDir (a
// server started again on the same port and folder finds them), with
// auth's changes to its options (credentials) if not nil. It is shut down
// at cleanup.
func NATSServer(t testing.TB, port int, storeDir string, auth func(*server.Options)) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	opts := &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir, NoLog: true, NoSigs: true}
	if auth != nil {
		auth(opts)
	}
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
