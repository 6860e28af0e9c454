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
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	return ns.ClientURL()
}
