package tests

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/stream"
)

// A target that stalls while the source takes ten times the spool cap of
// writes to the moving slots: the replica link fails at the cap instead of
// filling the disk, and the move rolls back, leaving the cluster as it was
// and the writes on the source.
func TestSpoolCapRollsBackAStalledMove(t *testing.T) {
	const limit = 1 << 20
	c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
	set := mustSlots(t, "0-999")
	// A few keys: an RDB smaller than the cap (a larger one, read slower
	// than it arrives, fails the move in the snapshot already).
	for i := 0; i < 200; i++ {
		if err := cc.Set(ctx, fmt.Sprint(tagIn(set, i%20), "before:", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var seen atomic.Int64 // the most a progress report showed spooled
	done, cancel := moveHeldInCatchUp(t, c, set, func(o *mover.Options) {
		o.MaxSpool = limit
		// Few commands in flight: the stalled target's socket holds
		// little, the spool the rest.
		o.Window = 100
		inner := o.Progress
		o.Progress = func(p mover.Progress) {
			inner(p)
			seen.Store(max(seen.Load(), p.SpoolBytes))
		}
	})
	defer cancel()

	// The target sleeps, half a second at a time, until the writes are in.
	stall := nodeClient(t, c, 3)
	written := make(chan struct{})
	stalled := make(chan error, 1)
	go func() {
		for i := 0; i < 60; i++ {
			if err := stall.Do(ctx, "DEBUG", "SLEEP", "0.5").Err(); err != nil {
				stalled <- err
				return
			}
			select {
			case <-written:
				stalled <- nil
				return
			default:
			}
		}
		stalled <- fmt.Errorf("the writes took more than 30 s")
	}()
	time.Sleep(50 * time.Millisecond)
	source := nodeClient(t, c, 0)
	value := strings.Repeat("s", 4096)
	var keys []string
	for i := 0; i < 10*limit/len(value); i++ {
		keys = append(keys, fmt.Sprint(tagIn(set, i%20), "spooled:", i))
	}
	for i := 0; i < len(keys); i += 256 {
		p := source.Pipeline()
		for _, k := range keys[i:min(i+256, len(keys))] {
			p.Set(ctx, k, value, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(written)
	if err := <-stalled; err != nil {
		t.Fatalf("stalling the target: %v", err)
	}

	var sum mover.Summary
	select {
	case sum = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the move did not end")
	}
	if sum.Result != mover.ResultRolledBack || !strings.Contains(sum.Error, stream.ErrSpoolFull.Error()) || !strings.Contains(sum.Error, "--max-spool") {
		t.Fatalf("move: %s: %s; want rolled back at the spool cap", sum.Result, sum.Error)
	}
	if sum.SpoolPeakBytes == 0 || sum.SpoolPeakBytes > limit || seen.Load() > limit {
		t.Fatalf("the spools held at most %d bytes (progress: %d), want some and at most the cap of %d", sum.SpoolPeakBytes, seen.Load(), limit)
	}

	// Every master sees the source own every slot, and no marks are left.
	sourceID := ""
	for i, n := range c.Nodes {
		nc := n.Client()
		top, err := cluster.Load(ctx, nc)
		nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			sourceID = top.Myself.ID
		}
		for _, s := range set.Slots() {
			if o := top.Owner(s); o == nil || o.ID != sourceID {
				t.Fatalf("node %d: slot %d is owned by %v, not the source", i, s, o)
			}
		}
		if m := top.Myself; len(m.Importing)+len(m.Migrating) > 0 {
			t.Fatalf("node %d keeps marks: importing %v, migrating %v", i, m.Importing, m.Migrating)
		}
	}
	target := nodeClient(t, c, 3)
	assertTargetHoldsNone(t, ctx, target, set)
	p := source.Pipeline()
	lens := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		lens[i] = p.StrLen(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, l := range lens {
		if l.Val() != int64(len(value)) {
			t.Fatalf("the source holds %d bytes of %s, written during the move, want %d", l.Val(), keys[i], len(value))
		}
	}
}
