package cutover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// A slot of the move that another move gave away meanwhile stops the
// cutover before the release: the source is unpaused, no slot changes hands,
// and the target claims nothing.
func TestSwitchRefusesSlotsTheSourceNoLongerOwns(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, harness.Options{})
	source, other, target := c.Nodes[0].Client(), c.Nodes[1].Client(), c.Nodes[2].Client()
	defer source.Close()
	defer other.Close()
	defer target.Close()
	do := func(c *redis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	// The other move: slot 100 went from the source to the other master.
	do(source, "CLUSTER", "DELSLOTS", 100)
	do(source, "CLUSTER", "SETSLOT", 100, "NODE", c.IDs[1])
	do(other, "CLUSTER", "SETSLOT", 100, "NODE", c.IDs[1])
	// This move: slots 0-199 importing on the target.
	for s := 0; s < 200; s++ {
		do(target, "CLUSTER", "SETSLOT", s, "IMPORTING", c.IDs[0])
	}

	res, err := Switch(ctx, Nodes{Source: source, Target: target, SourceID: c.IDs[0], TargetID: c.IDs[2], Others: []*redis.Client{other}},
		Plan{Slots: slots.NewSet(slots.Range{Start: 0, End: 199}), PauseBudget: 2 * time.Second, FenceTimeout: 250 * time.Millisecond},
		func(context.Context, int64) error { return nil },
		func(int64) { t.Error("froze the stream for a release that must not happen") })
	if !errors.Is(err, ErrNotOwner) || res.Released {
		t.Fatalf("switch over a slot the source gave away: released %v, %v", res.Released, err)
	}
	src, err := cluster.Load(ctx, source)
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := cluster.Load(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if !src.Myself.Slots.Contains(0) || !src.Myself.Slots.Contains(199) || src.Owner(100).ID != c.IDs[1] {
		t.Fatalf("the source's view changed: owns 0 %v, 199 %v; 100 owned by %s", src.Myself.Slots.Contains(0), src.Myself.Slots.Contains(199), src.Owner(100).ID)
	}
	if tgt.Myself.Slots.Len() != 0 || len(tgt.Myself.Importing) != 200 {
		t.Fatalf("the target changed: owns %s, importing %d slots", &tgt.Myself.Slots, len(tgt.Myself.Importing))
	}
	// Unpaused: a write goes through at once.
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := source.Set(wctx, "{"+tagOf(8000)+"}:after", "v", 0).Err(); err != nil {
		t.Fatalf("write to the source after the refused cutover: %v", err)
	}
}
