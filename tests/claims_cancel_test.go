package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
)

// Issue 10, untested claim 2. The README: "a change of the source's
// replication ID cancels the move (rolled back)". The move is held in
// catch-up (a fence that is never met) while a writer runs; the source's
// replication ID then changes under it, once by DEBUG CHANGE-REPL-ID (the
// replication link stays up, so only the move's own check can see it) and
// once by a failover of the source to its replica. Each time the move must
// end rolled back for that reason, the target hold no key of the slots and
// no mark, the data of the slots be as before on whoever serves them now,
// and the writer lose nothing and see no ASK or TRYAGAIN.
func TestClaimsSourceReplIDChangeCancelsMove(t *testing.T) {
	t.Run("DEBUG CHANGE-REPL-ID", func(t *testing.T) {
		c := fourMasters(t)
		ctx := testContext(t, 2*time.Minute)
		cc := c.Client()
		defer cc.Close()
		set := mustSlots(t, "0-5460")
		moved := keysIn(load(t, cc, 5_000, set), set)
		before, err := localcluster.Capture(ctx, cc, moved)
		if err != nil {
			t.Fatal(err)
		}
		source := c.Nodes[0].Client()
		defer source.Close()
		w := startWriter(t, c, 1_000_000)
		done, cancel := moveHeldInCatchUp(t, c, set)
		defer cancel()
		if err := source.Do(ctx, "DEBUG", "CHANGE-REPL-ID").Err(); err != nil {
			cancel()
			<-done
			t.Skipf("skipped: this build has no DEBUG CHANGE-REPL-ID: %v", err)
		}
		sum := awaitMove(t, done, cancel, 20*time.Second, "replication ID changed")
		w.finish(t)
		assertReplIDRollback(t, c, set, sum, c.IDs[0], c.Nodes[0], before)
	})

	t.Run("failover of the source", func(t *testing.T) {
		c := fourMasters(t)
		ctx := testContext(t, 2*time.Minute)
		cc := c.Client()
		defer cc.Close()
		set := mustSlots(t, "0-5460")
		moved := keysIn(load(t, cc, 5_000, set), set)
		replica := addReplica(t, c, 0)
		rc := replica.Client()
		defer rc.Close()
		replicaID, err := rc.ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, replica)
		c.IDs = append(c.IDs, replicaID)
		if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		before, err := localcluster.Capture(ctx, cc, moved)
		if err != nil {
			t.Fatal(err)
		}
		source := c.Nodes[0].Client()
		defer source.Close()
		oldID, err := replID(ctx, source)
		if err != nil {
			t.Fatal(err)
		}
		// A coordinated failover holds the old master's writers until the
		// replica took over, then sends them there (MOVED, followed by
		// the client): the writer must still get no error.
		w := startWriter(t, c, 1_000_000)
		// The move applies no stream until the failover is over: the
		// target trails the writer, so no cutover attempt pauses and
		// unpauses the source meanwhile. With attempts every ~35 ms (a
		// fence held at 1 ns), the failover did not complete in 2 runs of
		// 5 on 7.0.15; with none, it did in 8 of 8 here, but once not in
		// CI, which is why failOver tries again. Why is not pinned down
		// (see failOver).
		failedOver := make(chan struct{})
		var failedOverOnce sync.Once
		over := func() { failedOverOnce.Do(func() { close(failedOver) }) }
		defer over()
		done, cancel := moveHeldInCatchUp(t, c, set, func(o *mover.Options) {
			o.MaxLag = 1
			o.Hooks.Delta = func(*stream.Command) bool {
				select {
				case <-failedOver:
				case <-time.After(time.Minute):
				}
				return true
			}
		})
		defer cancel()
		err = failOver(ctx, rc, source, oldID, t.Logf)
		over()
		if err != nil {
			cancel()
			<-done
			t.Fatalf("%v\nsource's log: %s\nreplica's log: %s", err, c.Nodes[0].LogTail(60), replica.LogTail(60))
		}
		sum := awaitMove(t, done, cancel, 30*time.Second, "")
		w.finish(t)
		// The slots are the promoted replica's now, with every key as it was.
		assertReplIDRollback(t, c, set, sum, replicaID, replica, before)
	})
}

// awaitMove waits up to bound for the held move to end by itself, and
// fails the test if it did not (the change went unnoticed) or if its error
// does not contain want ("" for any error).
func awaitMove(t *testing.T, done <-chan mover.Summary, cancel func(), bound time.Duration, want string) mover.Summary {
	t.Helper()
	select {
	case sum := <-done:
		if sum.Result != mover.ResultRolledBack || !strings.Contains(sum.Error, want) {
			t.Fatalf("move: %s (%s): want rolled back for %q", sum.Result, sum.Error, want)
		}
		t.Logf("move: %s: %s", sum.Result, sum.Error)
		return sum
	case <-time.After(bound):
		cancel()
		sum := <-done
		t.Fatalf("the move did not notice the change of the source's replication ID within %s; cancelled: %s (%s)", bound, sum.Result, sum.Error)
		return sum
	}
}

// assertReplIDRollback checks the state after a move rolled back: the
// target holds no key of set, every node sees owner serve every slot of it
// with no mark left, owner holds every moved key as before, and no node
// holds keys of a slot it does not serve.
func assertReplIDRollback(t *testing.T, c *localcluster.Cluster, set *slots.Set, sum mover.Summary, owner string, ownerNode *localcluster.Server, before *localcluster.KeyStates) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	if sum.KeysCopied == 0 {
		t.Fatalf("the move copied nothing before it was cancelled: the rollback removed nothing (%+v)", sum)
	}
	target := c.Nodes[3].Client()
	defer target.Close()
	counts, err := cluster.CountKeys(ctx, target, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range counts {
		if n != 0 {
			t.Fatalf("the rolled-back target keeps %d keys of slot %d", n, set.Slots()[i])
		}
	}
	if err := c.WaitOwner(ctx, set, owner, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	o := ownerNode.Client()
	defer o.Close()
	if err := before.Compare(ctx, o); err != nil {
		t.Fatalf("the slots' owner after the rollback: %v", err)
	}
	assertNoOrphans(t, c)
}

// failOver runs CLUSTER FAILOVER on replica until its master's replication
// ID is no longer oldID. A manual failover gives up silently after 5s (the
// master's pause ends, nothing changes); once in a CI run of many it did,
// for a reason its logs did not keep. A retry waits 12s, past the 10s in
// which the other masters refuse a second vote for a replica of the same
// master.
func failOver(ctx context.Context, replica, master *redis.Client, oldID string, logf func(string, ...any)) error {
	const tries, wait = 3, 12 * time.Second
	for try := 1; try <= tries; try++ {
		if err := replica.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER on %s: %w", replica.Options().Addr, err)
		}
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			id, err := replID(ctx, master)
			if err != nil {
				return fmt.Errorf("replication ID of %s: %w", master.Options().Addr, err)
			}
			if id != oldID {
				return nil
			}
		}
		logf("CLUSTER FAILOVER %d of %d on %s: %s still has replication ID %s after %s", try, tries, replica.Options().Addr, master.Options().Addr, oldID, wait)
	}
	return fmt.Errorf("%s still has replication ID %s after %d CLUSTER FAILOVERs on its replica %s", master.Options().Addr, oldID, tries, replica.Options().Addr)
}

// replID reads a node's master_replid.
func replID(ctx context.Context, c *redis.Client) (string, error) {
	text, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(l, "master_replid:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// Issue 10, untested claim 2, second half. The README: a transaction or a
// script flagged allow-cross-slot-keys that writes chosen slots and others
// at once "is applied split (its parts end on different nodes)". On a cluster
// source the only such write a client can make is a script flagged
// allow-cross-slot-keys that writes a key of a moving slot and an
// undeclared key of another slot of the same node (a single command, or
// declared keys, across slots are refused with CROSSSLOT, which this test
// shows first); Redis streams its effects as one MULTI block. The move is
// held in catch-up until the script has run.
func TestClaimsCrossSlotWriteIntoMovingSlot(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-2000")
	moved := keysIn(load(t, cc, 5_000, set), set)
	source := c.Nodes[0].Client()
	defer source.Close()
	in := tagIn(set, 40) + "in"
	out := tagIn(mustSlots(t, "3000-5460"), 41) + "out"
	for _, k := range []string{in, out} {
		if err := source.Set(ctx, k, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, err := localcluster.Capture(ctx, cc, moved)
	if err != nil {
		t.Fatal(err)
	}
	const flagged = "#!lua flags=allow-cross-slot-keys\n"
	// What a cluster source refuses: one command across slots, even in a
	// flagged script, and declared keys across slots.
	if err := source.Eval(ctx, flagged+`return redis.call('MSET', KEYS[1], 'x', ARGV[1], 'x')`, []string{in}, out).Err(); err == nil {
		t.Fatal("a cross-slot MSET inside a script ran on the source")
	}
	if err := source.Eval(ctx, flagged+`return 1`, []string{in, out}).Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script declaring keys of two slots: %v, want CROSSSLOT", err)
	}
	ran := make(chan struct{})
	var scriptErr atomic.Value
	var once atomic.Bool
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sum, err := mover.Run(mctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), MaxAttempts: 1_000_000, FenceTimeout: 5 * time.Millisecond,
		Progress: func(p mover.Progress) {
			if p.Phase == mover.PhaseCatchUp && once.CompareAndSwap(false, true) {
				go func() {
					defer close(ran)
					err := source.Eval(ctx, flagged+`redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', ARGV[2], ARGV[1]); return 1`, []string{in}, "after", out).Err()
					if err != nil {
						scriptErr.Store(err)
					}
				}()
			}
		},
		Hooks: mover.Hooks{Fence: holdFenceUntil(ran)},
	})
	select {
	case <-ran:
	default:
		t.Fatalf("the move never reached catch-up, so the script never ran: %s (%v)", sum.Result, err)
	}
	if e := scriptErr.Load(); e != nil {
		t.Fatalf("the cross-slot script on the source: %v", e)
	}
	target := c.Nodes[3].Client()
	defer target.Close()
	// What the README says: the block is applied split and the move
	// completes; the data must be right: the moved key with the script's
	// write on the target, the other key with its own on the source.
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s (%v): a cross-slot script is applied split, the move goes on", sum.Result, err)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if v, err := target.Get(ctx, in).Result(); err != nil || v != "after" {
		t.Fatalf("split: the moved key on the target: %q, %v; want the script's write", v, err)
	}
	if v, err := source.Get(ctx, out).Result(); err != nil || v != "after" {
		t.Fatalf("split: the other key on the source: %q, %v; want the script's write", v, err)
	}
	assertNoOrphans(t, c)
	fresh := c.Client()
	defer fresh.Close()
	if err := before.Compare(ctx, fresh); err != nil {
		t.Fatalf("the other moved keys after the move: %v", err)
	}
}

// holdFenceUntil is a Hooks.Fence that misses every fence (waits out its
// deadline) until released is closed, then waits for it as the move would:
// the move stays in catch-up, its cutovers failing harmlessly, until the
// test has done what it must do during the catch-up.
func holdFenceUntil(released <-chan struct{}) func(cutover.Fence) cutover.Fence {
	return func(f cutover.Fence) cutover.Fence {
		return func(ctx context.Context, off int64) error {
			select {
			case <-released:
				return f(ctx, off)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}
