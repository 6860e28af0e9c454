package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/mover"
)

// On Valkey 8 the source releases only at an offset the target reached
// (a guarded release), and a target importing slots that its source no
// longer claims takes them over by gossip. A move stopped right after its
// release is therefore finished forward: fix claims the slots on the
// target (unless gossip got there first) and cleans the source's copies.
// Every key ends on the target, owned by it in every view, and nowhere else.
func TestFixFinishesAGuardedReleaseForward(t *testing.T) {
	c := fourMasters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	source, target := c.Nodes[0].Client(), c.Nodes[3].Client()
	defer source.Close()
	defer target.Close()
	if guarded, err := cutover.SetSlotBlocks(ctx, source); err != nil || !guarded {
		t.Skipf("only where the release is guarded (Valkey 8): %v", err)
	}
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-99")
	moved := keysIn(load(t, cc, 5000, set), set)
	want, err := localcluster.Capture(ctx, cc, moved)
	if err != nil {
		t.Fatal(err)
	}

	opts := mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
	}
	opts.Hooks.AfterRelease = func() error { return errCrash }
	if sum, err := mover.Run(ctx, opts); err == nil {
		t.Fatalf("the move with a crash after its release ended %s with no error", sum.Result)
	}

	code, stdout, stderr := runCLI(t, "fix", "--cluster", c.Nodes[1].Addr)
	if code != 0 {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	claimed := strings.Contains(stdout, "claim slots 0-99 on "+c.Nodes[3].Addr)
	cleaned := strings.Contains(stdout, " on "+c.Nodes[0].Addr+": orphaned keys of slots that "+c.Nodes[3].Addr+" owns")
	if !cleaned || strings.Contains(stdout, "give-back") {
		t.Fatalf("fix must finish the move forward (claim unless gossip came first, then clean the source):\n%s", stdout)
	}
	t.Logf("fix (claim made by fix: %v, else by gossip):\n%s", claimed, stdout)
	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A fresh client: DEBUG DIGEST-VALUE is not routed by its key, and the
	// first one's slot map still names the source, whose copies are gone.
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatalf("after fix, through a cluster client: %v", err)
	}
	for _, s := range set.Slots() {
		if n := source.ClusterCountKeysInSlot(ctx, int(s)).Val(); n != 0 {
			t.Fatalf("the source keeps %d keys of slot %d", n, s)
		}
	}
	if code, stdout, _ := runCLI(t, "fix", "--cluster", c.Nodes[0].Addr); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("second fix: exit %d\n%s", code, stdout)
	}
}

var errCrash = errors.New("crashed right after the release (test hook)")
