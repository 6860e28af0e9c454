package cutover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/tests/harness"
)

// A slot of the move that another move gave away meanwhile stops the
// cutover before the release: the source is unpaused, no slot changes hands,
// and the target claims nothing.
func TestSwitchRefusesSlotsTheSourceNoLongerOwns(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
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
	// The other move: slot 100 went from the source to the other master,
	// which took it importing (bumping its epoch, so that every node
	// takes its claim), and every node has learnt so. Set up in a less
	// orderly way, the target saw the source drop a slot it still owned
	// in the target's view, and once, under load, a Valkey 8 target
	// importing it from the source ended owning it.
	do(other, "CLUSTER", "SETSLOT", 100, "IMPORTING", c.IDs[0])
	do(other, "CLUSTER", "SETSLOT", 100, "NODE", c.IDs[1])
	do(source, "CLUSTER", "SETSLOT", 100, "NODE", c.IDs[1])
	if err := c.WaitOwner(ctx, slots.NewSet(slots.Range{Start: 100, End: 100}), c.IDs[1], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// This move: slots 0-199 importing on the target.
	for s := 0; s < 200; s++ {
		do(target, "CLUSTER", "SETSLOT", s, "IMPORTING", c.IDs[0])
	}

	res, err := switchOnce(ctx, Nodes{Source: source, Target: target, SourceID: c.IDs[0], TargetID: c.IDs[2], Others: []*redis.Client{other}},
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
	// Slot 100 aside: Valkey 8 clears an importing mark by itself once the
	// node it imports from no longer claims the slot.
	delete(tgt.Myself.Importing, 100)
	if tgt.Myself.Slots.Len() != 0 || len(tgt.Myself.Importing) != 199 {
		t.Fatalf("the target changed: owns %s, importing %d of the other 199 slots", &tgt.Myself.Slots, len(tgt.Myself.Importing))
	}
	// Unpaused: a write goes through at once. Timed, not bounded by a
	// context: the harness's clients ignore context deadlines
	// (ContextTimeoutEnabled is off), and a source left paused answers
	// within the 2 s budget.
	start := time.Now()
	if err := source.Set(ctx, "{"+tagOf(8000)+"}:after", "v", 0).Err(); err != nil {
		t.Fatalf("write to the source after the refused cutover: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a write to the source after the refused cutover took %s: still paused", took)
	}
}

// A fence missed before the release, whether it runs out (the target never
// gets there) or is reached too late in the pause, ends the cutover with
// ErrFenceMissed and nothing released, and lifts the pause at once: the
// source takes a write in well under the budget's remainder.
func TestSwitchUnpausesWhenTheFenceIsMissed(t *testing.T) {
	// One cluster for both: a missed fence leaves it as it was.
	cl, n := pauseTestCluster(t)
	for _, c := range []struct {
		name          string
		budget, fence time.Duration
		wait          func(ctx context.Context) error
		want          string
	}{
		// Blocks until its deadline, FenceTimeout after the pause: 1.75 s
		// of the budget would be left.
		{"timeout", 2 * time.Second, 250 * time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, "target not at offset"},
		// Reached, but past half the budget: 1.4 s would be left.
		{"late", 3 * time.Second, 2500 * time.Millisecond, func(context.Context) error { time.Sleep(1600 * time.Millisecond); return nil }, "too late in a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			blocks, err := SetSlotBlocks(ctx, n.Source)
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			p := pausePlan()
			p.PauseBudget, p.FenceTimeout, p.SetSlotBlocks = c.budget, c.fence, blocks
			res, err := switchOnce(ctx, n, p,
				func(ctx context.Context, _ int64) error { calls++; return c.wait(ctx) },
				func(int64) { t.Error("the feed was frozen: a release went through") })
			returned := time.Now()
			if !errors.Is(err, ErrFenceMissed) || res.Released || calls != 1 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("switch with a missed fence: released %v, fence calls %d, %v; want %v (%q)", res.Released, calls, err, ErrFenceMissed, c.want)
			}
			if res.Pause <= 0 {
				t.Errorf("no unpause was timed: result %+v", res)
			}
			// The parts are disjoint spans of the pause.
			if res.FenceWait <= 0 || res.Rest() < 0 {
				t.Errorf("pause %s: fence wait %s, rest %s; want both parts of it", res.Pause, res.FenceWait, res.Rest())
			}
			if err := n.Source.Set(ctx, "{"+tagOf(0)+"}:at-once", "v", 0).Err(); err != nil {
				t.Fatalf("write to the source: %v", err)
			}
			if took := time.Since(returned); took > time.Second {
				t.Fatalf("a write to the source took %s after the missed fence: still paused", took)
			}
			assertSourceServes(t, cl, n)
		})
	}
}

// pauseTestCluster is a source owning 0-8191, another master, and an empty
// target importing slots 0-199 from the source.
func pauseTestCluster(t *testing.T) (*localcluster.Cluster, Nodes) {
	t.Helper()
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
	source, other, target := c.Nodes[0].Client(), c.Nodes[1].Client(), c.Nodes[2].Client()
	t.Cleanup(func() { source.Close(); other.Close(); target.Close() })
	// A master's offset moves only once it has a replica: a replica link,
	// as a move has.
	link, err := stream.Open(ctx, stream.Config{Conn: cluster.Conn{Addr: c.Nodes[0].Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	for s := 0; s < 200; s++ {
		if err := target.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", c.IDs[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return c, Nodes{Source: source, Target: target, SourceID: c.IDs[0], TargetID: c.IDs[2], Others: []*redis.Client{other}}
}

// pausePlan moves the slots pauseTestCluster marks, with a pause budget of
// 2 s and fences of 250 ms.
func pausePlan() Plan {
	return Plan{Slots: slots.NewSet(slots.Range{Start: 0, End: 199}), PauseBudget: 2 * time.Second, FenceTimeout: 250 * time.Millisecond}
}

// breakPause ends the source's write pause from another client, as a
// second move's or an operator's CLIENT UNPAUSE would, and writes n keys of
// slot 0 through the opened gap. It returns the source's offset after them.
func breakPause(t *testing.T, addr string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	if err := c.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := c.Set(ctx, fmt.Sprintf("{%s}:gap:%d", tagOf(0), i), i, 0).Err(); err != nil {
			t.Fatalf("write through the broken pause: %v", err)
		}
	}
	off, err := ReplOffset(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// The pause is not a lock: when another client ends it between the fence
// and the release, the source accepts writes in the moving slots that the
// first fence does not cover. The target must not claim before it has
// reached the offset the source reports at the release, which covers them.
func TestSwitchWaitsForWritesThroughABrokenPause(t *testing.T) {
	res, fences, afterGap, frozen, target := switchThroughBrokenPause(t, pausePlan())
	if len(fences) != 2 || fences[0] != res.Fence || fences[1] != res.ReleaseOffset {
		t.Fatalf("fences waited for: %v; result %+v", fences, res)
	}
	if res.ReleaseOffset < afterGap || res.ReleaseOffset <= res.Fence || frozen != res.ReleaseOffset {
		t.Fatalf("release offset %d, fence %d, source after the gap's writes %d, frozen at %d", res.ReleaseOffset, res.Fence, afterGap, frozen)
	}
	assertClaimed(t, target)
}

// When the target cannot reach the release offset in time, it must not
// claim: the source takes the slots back, is unpaused, and the move can try
// again later with nothing lost.
func TestSwitchGivesTheSlotsBackWhenTheTargetCannotFollow(t *testing.T) {
	ctx := context.Background()
	c, n := pauseTestCluster(t)
	if blocks, _ := SetSlotBlocks(ctx, n.Source); blocks {
		t.Skip("Valkey 8 takes imported slots over by gossip once the source stops claiming them: there the release is guarded instead (TestGuardedRelease…)")
	}
	var frozen []int64
	res, err := switchOnce(ctx, n, pausePlan(), cannotFollow(t, c.Nodes[0].Addr), func(off int64) { frozen = append(frozen, off) })
	if !errors.Is(err, ErrFenceMissed) || res.Released {
		t.Fatalf("switch with a target that cannot follow: released %v, %v", res.Released, err)
	}
	if len(frozen) != 2 || frozen[0] != res.ReleaseOffset || frozen[1] != -1 {
		t.Fatalf("freeze calls %v, release offset %d: the feed must be frozen at the release and thawed after the give-back", frozen, res.ReleaseOffset)
	}
	assertSourceServes(t, c, n)
}

// switchThroughBrokenPause runs one switch of plan p on a pauseTestCluster
// whose pause another client ends at the first fence, writing 20 keys
// through the gap. It returns the result, the offsets the switch waited
// for, the source's offset after the gap's writes, the offset the feed was
// frozen at, and the target, once the switch has released the slots.
func switchThroughBrokenPause(t *testing.T, p Plan) (res Result, fences []int64, afterGap, frozen int64, target *redis.Client) {
	t.Helper()
	c, n := pauseTestCluster(t)
	res, err := switchOnce(context.Background(), n, p,
		func(_ context.Context, off int64) error {
			fences = append(fences, off)
			if len(fences) == 1 {
				afterGap = breakPause(t, c.Nodes[0].Addr, 20)
			}
			return nil
		},
		func(off int64) { frozen = off })
	if err != nil || !res.Released {
		t.Fatalf("switch: released %v, %v", res.Released, err)
	}
	return res, fences, afterGap, frozen, n.Target
}

// cannotFollow is the fence of a target that never gets past the first:
// the first call breaks the source's pause at addr and writes 5 keys
// through it, the next waits until its context ends.
func cannotFollow(t *testing.T, addr string) Fence {
	calls := 0
	return func(ctx context.Context, _ int64) error {
		calls++
		if calls == 1 {
			breakPause(t, addr, 5)
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
}

// assertClaimed fails unless the target owns slots 0 and 199 in its own view.
func assertClaimed(t *testing.T, target *redis.Client) {
	t.Helper()
	tgt, err := cluster.Load(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	if !tgt.Myself.Slots.Contains(0) || !tgt.Myself.Slots.Contains(199) {
		t.Fatalf("the target did not claim: owns %s", &tgt.Myself.Slots)
	}
}

// Cutovers from one source take turns; a cancelled wait gives up.
func TestLockSourceSerializes(t *testing.T) {
	unlock, err := lockSource(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := lockSource(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock of one source while held: %v", err)
	}
	other, err := lockSource(context.Background(), "b")
	if err != nil {
		t.Fatalf("another source's lock: %v", err)
	}
	other()
	unlock()
	again, err := lockSource(context.Background(), "a")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again()
}

// Once the source has released the slots, a cancelled caller (SIGTERM) must
// not stop the claim: the slots would be left between two nodes, clients
// bouncing, until fix. The switch finishes on a context of its own.
func TestSwitchClaimsAfterTheReleaseEvenWhenCancelled(t *testing.T) {
	c, n := pauseTestCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	res, err := switchOnce(ctx, n, pausePlan(),
		func(context.Context, int64) error {
			calls++
			if calls == 1 {
				breakPause(t, c.Nodes[0].Addr, 3) // so that there is a wait after the release
			} else {
				cancel() // the caller is told to stop, after the release
			}
			return nil
		},
		func(int64) {})
	if err != nil || !res.Released || calls != 2 {
		t.Fatalf("switch cancelled after the release: released %v, fence calls %d, %v", res.Released, calls, err)
	}
	assertClaimed(t, n.Target)
}

// guardedPlan is the plan of the Valkey 8 release (Plan.SetSlotBlocks),
// which the tests also run on Redis 7, as its script needs nothing Valkey
// has alone; 6.2 has no script flags.
func guardedPlan(t *testing.T) Plan {
	t.Helper()
	v, err := localcluster.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !v.AtLeast(7, 0) {
		t.Skipf("%s has no script flags (no-writes), which the guarded release needs", v)
	}
	p := pausePlan()
	p.SetSlotBlocks = true
	return p
}

// Where the release is guarded (Plan.SetSlotBlocks: Valkey 8, whose target
// takes imported slots over by gossip once the source stops claiming
// them), writes that came through a broken pause make the source refuse
// the release; the target catches up with them, and the release then goes
// through at an offset it has reached: there is nothing left to wait for
// after it.
func TestGuardedReleaseWaitsForWritesThroughABrokenPause(t *testing.T) {
	res, fences, afterGap, frozen, target := switchThroughBrokenPause(t, guardedPlan(t))
	if res.Refusals != 1 || len(fences) != 2 || fences[1] < afterGap {
		t.Fatalf("fences waited for %v, refusals %d; the source was at %d after the gap's writes", fences, res.Refusals, afterGap)
	}
	if res.Fence != fences[1] || res.ReleaseOffset != fences[1] || frozen != res.ReleaseOffset || res.CatchUp != 0 {
		t.Fatalf("result %+v, frozen at %d: the release must be at the last fence, with no wait after it", res, frozen)
	}
	assertClaimed(t, target)
}

// A target that cannot reach the offset of the writes that came through a
// broken pause never sees the slots released: the source keeps them, and
// (a second later, time for gossip) no node sees another owner, so the
// target cannot take them over; the move may try again.
func TestGuardedReleaseKeepsTheSlotsWhenTheTargetCannotFollow(t *testing.T) {
	ctx := context.Background()
	p := guardedPlan(t)
	c, n := pauseTestCluster(t)
	res, err := switchOnce(ctx, n, p, cannotFollow(t, c.Nodes[0].Addr), func(int64) { t.Error("the feed was frozen: a release went through") })
	if !errors.Is(err, ErrFenceMissed) || res.Released || res.Refusals != 1 {
		t.Fatalf("switch with a target that cannot follow: released %v, refusals %d, %v", res.Released, res.Refusals, err)
	}
	time.Sleep(time.Second)
	assertSourceServes(t, c, n)
}

// assertSourceServes fails unless every node sees the source own slots 0,
// 100 and 199, the target still imports all 200 slots, and the source
// takes a write at once: unpaused.
func assertSourceServes(t *testing.T, c *localcluster.Cluster, n Nodes) {
	t.Helper()
	ctx := context.Background()
	source, target := n.Source, n.Target
	for _, node := range append([]*redis.Client{source, target}, n.Others...) {
		top, err := cluster.Load(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []uint16{0, 100, 199} {
			if o := top.Owner(s); o == nil || o.ID != c.IDs[0] {
				t.Fatalf("%s sees slot %d owned by %v, not the source", node.Options().Addr, s, o)
			}
		}
		if node == target && len(top.Myself.Importing) != 200 {
			t.Fatalf("the target's importing marks changed: %d", len(top.Myself.Importing))
		}
	}
	start := time.Now()
	if err := source.Set(ctx, "{"+tagOf(0)+"}:after", "v", 0).Err(); err != nil {
		t.Fatalf("write to the source: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a write to the source took %s: still paused", took)
	}
}

// switchOnce is one whole attempt: Release, then the claim if it released.
func switchOnce(ctx context.Context, n Nodes, p Plan, fence Fence, freeze func(off int64)) (Result, error) {
	c, res, err := Release(ctx, n, p, fence, freeze)
	if c == nil {
		return res, err
	}
	return c.Claim(ctx)
}

// Release stops at the point of no return: the source paused and without
// the slots, the target not yet owning them, no other cutover from the
// source. Then either the claim, which runs even on a cancelled context,
// or, for a move that may not go on, Abandon, which leaves the slots
// released for fix; both unpause the source and free it for the next.
func TestReleaseLeavesOnlyTheClaim(t *testing.T) {
	for _, claim := range []bool{true, false} {
		t.Run(map[bool]string{true: "claim", false: "abandon"}[claim], func(t *testing.T) {
			ctx := context.Background()
			c, n := pauseTestCluster(t)
			source, target := n.Source, n.Target
			p := Plan{Slots: slots.NewSet(slots.Range{Start: 0, End: 199}), PauseBudget: 5 * time.Second, FenceTimeout: time.Second}
			// As the mover does: on Valkey 8 a paused source holds back a
			// SETSLOT in its release, which must go guarded instead.
			blocks, err := SetSlotBlocks(ctx, source)
			if err != nil {
				t.Fatal(err)
			}
			p.SetSlotBlocks = blocks
			noFence := func(context.Context, int64) error { return nil }
			cl, res, err := Release(ctx, n, p, noFence, func(int64) {})
			if err != nil || cl == nil || !res.Released {
				t.Fatalf("release: claimer %v, released %v, %v", cl != nil, res.Released, err)
			}
			owns := func(node *redis.Client) bool {
				top, err := cluster.Load(ctx, node)
				if err != nil {
					t.Fatal(err)
				}
				return top.Myself.Slots.Contains(0) || top.Myself.Slots.Contains(199)
			}
			if owns(source) || owns(target) {
				t.Fatalf("released, not claimed: the source owns the slots %v, the target %v", owns(source), owns(target))
			}
			o := *source.Options()
			o.ReadTimeout, o.MaxRetries = 200*time.Millisecond, -1
			probe := redis.NewClient(&o)
			err = probe.Set(ctx, "{"+tagOf(300)+"}:paused", "v", 0).Err()
			probe.Close()
			if err == nil {
				t.Fatal("the source took a write between the release and the claim: not paused")
			}
			lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, _, err = Release(lctx, n, p, noFence, func(int64) {})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a second cutover from the source before the claim: %v, want it to wait its turn", err)
			}

			if claim {
				gone, cancel := context.WithCancel(ctx)
				cancel()
				res, err = cl.Claim(gone)
				if err != nil || res.NoOwner <= 0 || res.Pause <= 0 {
					t.Fatalf("claim: %v, no owner for %s, paused %s", err, res.NoOwner, res.Pause)
				}
				assertClaimed(t, target)
			} else {
				if err := cl.Abandon(); err != nil {
					t.Fatal(err)
				}
				// Valkey 8's target takes the slots by gossip once the
				// source stops claiming them; elsewhere nobody owns them.
				if owns(source) || owns(target) && !blocks {
					t.Fatalf("abandoned: the source owns the slots %v, the target %v; want neither", owns(source), owns(target))
				}
			}
			// Unpaused: a write is answered at once. After an abandon on
			// Valkey 8 (a release of DELSLOTS alone) the source sees slots
			// with no owner, and answers CLUSTERDOWN until fix.
			start := time.Now()
			err = source.Set(ctx, "{"+tagOf(300)+"}:after", "v", 0).Err()
			if clusterDown := err != nil && strings.HasPrefix(err.Error(), "CLUSTERDOWN"); err != nil && !(clusterDown && blocks && !claim) || time.Since(start) > time.Second {
				t.Fatalf("a write to the source after the %s: %v in %s", t.Name(), err, time.Since(start))
			}
			uctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			unlock, err := lockSource(uctx, c.IDs[0])
			if err != nil {
				t.Fatalf("the source is still locked after the %s: %v", t.Name(), err)
			}
			unlock()
		})
	}
}
