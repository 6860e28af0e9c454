package natsapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// One live sidecar per node: a second one is refused and told who holds
// the node; a released claim is free at once; a claim no longer renewed
// (its sidecar died) is taken over after the lapse, at once by the same
// host and state directory; a holder whose claim another took learns it.
func TestClaimNode(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	const node = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	claim := func(pid int, host string) (*Claim, error) {
		return ClaimNode(ctx, nc, ClaimConfig{NodeID: node, Heartbeat: 100 * time.Millisecond,
			Holder: Holder{Host: host, PID: pid, Admin: "127.0.0.1:7100", StateDir: "/var/lib/slotmover", Since: time.Now()}})
	}
	crash := func(c *Claim) { close(c.stop); <-c.done } // the heartbeat stops; nothing is released

	a, err := claim(1, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claim(2, "host-b"); !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "pid 1 on host-a") {
		t.Fatalf("second claim while the first lives: %v, want ErrClaimed naming pid 1 on host-a", err)
	}
	a.Release()
	b, err := claim(2, "host-b")
	if err != nil {
		t.Fatalf("claim after a release: %v", err)
	}
	crash(b)
	start := time.Now()
	c, err := claim(3, "host-c")
	if err != nil || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("claim of a dead sidecar's node: %v after %s, want it taken after the lapse", err, time.Since(start))
	}
	crash(c)
	start = time.Now()
	c2, err := claim(4, "host-c")
	if err != nil || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("restart on the same host and state: %v after %s, want at once", err, time.Since(start))
	}

	// Another writer takes the key: the holder's next renewal sees it.
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, ClaimBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, node, []byte(`{"pid": 9}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c2.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder never saw its claim taken")
	}
	c2.Release()
	if e, err := kv.Get(ctx, node); err != nil || string(e.Value()) != `{"pid": 9}` {
		t.Fatalf("a lost claim's release touched the new holder's: %v", err)
	}
}
