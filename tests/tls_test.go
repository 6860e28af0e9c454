package tests

import (
	"errors"
	"strings"
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
	ctx := testContext(t, 2*time.Minute)
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
	// Without TLS the move back is refused before anything changes, for
	// what it is: the source cannot be reached in plain text.
	// On the target itself: cc's slot map may still name the old owner.
	before, err = localcluster.Capture(ctx, target, keysIn(keys, set))
	if err != nil {
		t.Fatal(err)
	}
	fingerprint, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plain := mover.Conn{Addr: c.Nodes[1].Addr}
	want := "cannot reach source " + c.Nodes[1].Addr
	sum, err = mover.Run(ctx, mover.Options{Source: plain, Target: conn(c.Nodes[0]), Slots: set, Logger: testLogger(t)})
	var refusal *mover.InputError
	if sum.Result != mover.ResultRefused || !errors.As(err, &refusal) || !strings.Contains(err.Error(), want) {
		t.Fatalf("plain-text move in a TLS cluster: %s: %v; want refused with %q", sum.Result, err, want)
	}
	// And by the command: exit 2 with the reason.
	code, stdout, stderr := runCLI(t, "move", "--json", "--source", c.Nodes[1].Addr, "--target", c.Nodes[0].Addr, "--slots", "0-8000")
	if code != 2 || !strings.Contains(stdout, `"result":"refused"`) || !strings.Contains(stderr, want) {
		t.Fatalf("slotmover move without --tls: exit %d, want 2 with %q; stdout %s; stderr %s", code, want, stdout, stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(stderr))
	if after, err := c.Fingerprint(ctx); err != nil || after != fingerprint {
		t.Fatalf("the refused moves changed the cluster (%v):\nbefore\n%s\nafter\n%s", err, fingerprint, after)
	}
	if err := before.Compare(ctx, target); err != nil {
		t.Fatal(err)
	}
}
