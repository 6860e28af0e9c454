package tests

import (
	"context"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/tests/harness"
)

// A move over TLS only: the replica link, the applier and the control
// connections all speak TLS with the cluster's certificate.
func TestMoveOverTLS(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{TLS: true})
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-8000")
	keys := load(t, cc, 5000, set)
	before, err := localcluster.Capture(ctx, cc, keysIn(keys, set))
	if err != nil {
		t.Fatal(err)
	}
	conn := func(s *localcluster.Server) mover.Conn {
		return mover.Conn{Addr: s.Addr, TLS: s.TLS}
	}
	sum, err := mover.Run(ctx, mover.Options{Source: conn(c.Nodes[0]), Target: conn(c.Nodes[1]), Slots: set, Logger: testLogger(t)})
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move over TLS: %s: %v", sum.Result, err)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	target := c.Nodes[1].Client()
	defer target.Close()
	if err := before.Compare(ctx, target); err != nil {
		t.Fatal(err)
	}
	// Without TLS the same move is refused before anything changes.
	plain := mover.Conn{Addr: c.Nodes[1].Addr}
	if sum, err := mover.Run(ctx, mover.Options{Source: plain, Target: conn(c.Nodes[0]), Slots: set, Logger: testLogger(t)}); sum.Result != mover.ResultRefused {
		t.Fatalf("plain-text move to a TLS cluster: %s: %v", sum.Result, err)
	}
}
