package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/tests/harness"
)

// The README: "a change of the source's
// replication ID cancels the move (rolled back)". The move is held in
// catch-up (a fence that is never met) while a writer runs; the source's
// replication ID then changes under it, once by DEBUG CHANGE-REPL-ID (the
// replication link stays up, so only the move's own check can see it) and
// once by a failover of the source to its replica. Each time the move must
// end rolled back for that reason, the target hold no key of the slots and
// no mark, the data of the slots be as before on whoever serves them now,
// and the writer lose nothing and see no ASK or TRYAGAIN.
func TestSourceReplIDChangeCancelsMove(t *testing.T) {
	t.Run("DEBUG CHANGE-REPL-ID", func(t *testing.T) {
		c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
		set := mustSlots(t, "0-5460")
		moved := keysIn(load(t, cc, 5_000, set), set)
		before := capture(t, ctx, cc, moved)
		source := nodeClient(t, c, 0)
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
		c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
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
		must(t, c.WaitHealthy(ctx, 30*time.Second))
		before := capture(t, ctx, cc, moved)
		source := nodeClient(t, c, 0)
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
	target := nodeClient(t, c, 3)
	assertTargetHoldsNone(t, ctx, target, set)
	must(t, c.WaitOwner(ctx, set, owner, 20*time.Second))
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

// FLUSHALL on the source during the move cancels it, with rollback.
func TestFlushAllCancelsMove(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
	load(t, cc, 5000, mustSlots(t, "0-5460"))
	source := nodeClient(t, c, 0)
	// The move is held in catch-up by a fence that is never met: without
	// the FLUSHALL, or if it goes unnoticed, it would stay there until
	// --max-catch-up (10 min). It gets this long.
	const bound = 30 * time.Second
	mctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var once sync.Once
	flushed := make(chan error, 1)
	start := time.Now()
	sum, err := mover.Run(mctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: mustSlots(t, "0-5460"), Logger: testLogger(t),
		FenceTimeout: time.Nanosecond, MaxAttempts: 1_000_000,
		Progress: func(p mover.Progress) {
			if p.Phase == mover.PhaseCatchUp {
				once.Do(func() {
					err := source.FlushAll(ctx).Err()
					flushed <- err
					if err != nil {
						cancel() // nothing to wait for
					}
				})
			}
		},
	})
	select {
	case ferr := <-flushed:
		if ferr != nil {
			t.Fatalf("FLUSHALL on the source: %v (move %s: %v)", ferr, sum.Result, err)
		}
	default:
		t.Fatalf("the move never reported catch-up, so no FLUSHALL was sent (move %s after %v: %v)", sum.Result, time.Since(start).Round(time.Millisecond), err)
	}
	if mctx.Err() != nil {
		t.Fatalf("the move did not notice the FLUSHALL within %s: %s: %v", bound, sum.Result, err)
	}
	if !errors.Is(err, mover.ErrSourceFlushed) || sum.Result != mover.ResultRolledBack {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	target := nodeClient(t, c, 3)
	if n := target.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("target keeps %d keys after the rollback", n)
	}
	must(t, c.WaitOwner(ctx, mustSlots(t, "0-5460"), c.IDs[0], 5*time.Second))
}

// FLUSHALL on the source while the snapshot streams cuts the RDB short and
// the move rolls back. Keys it sent the target with replies off may still
// sit in the target's buffers then; the rollback must end with the target
// holding nothing of the slots, read as soon as the move returns, whatever
// point of the snapshot the flush hits.
func TestFlushAllDuringSnapshotLeavesTargetEmpty(t *testing.T) {
	// The target owns slots and keys of its own: its rollback is the paced
	// purge, not a flush of the whole node.
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16000", "16001-16383"}, localcluster.Options{})
	ctx := testContext(t, 4*time.Minute)
	cc := clusterClient(t, c)
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	set := mustSlots(t, "0-5460")
	for _, after := range []int64{1, 5_000, 20_000} {
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		load(t, cc, 100_000, set)
		own, err := target.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		flushed := make(chan int64, 1)
		flushErr := make(chan error, 1)
		go func() {
			// Flush once the target holds `after` keys, or give up.
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				select {
				case <-done:
					flushed <- -1
					return
				default:
				}
				n, _ := target.DBSize(ctx).Result()
				if n-own >= after {
					// A move's lock on the target (Valkey 8) is no copy.
					var lock *redis.IntCmd
					target.Pipelined(ctx, func(p redis.Pipeliner) error {
						p.Do(ctx, "ASKING")
						lock = p.Exists(ctx, mover.LockKey(set.Slots()[0]))
						return nil
					})
					n -= lock.Val()
				}
				if n-own >= after {
					// A target that stalls meanwhile keeps a backlog of the
					// move's commands in its socket buffers when the move fails.
					stall := c.Nodes[3].Client()
					go func() { defer stall.Close(); stall.Do(ctx, "DEBUG", "SLEEP", "0.3") }()
					time.Sleep(50 * time.Millisecond)
					flushErr <- source.FlushAll(ctx).Err()
					flushed <- n - own
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
			flushed <- -1
		}()
		sum, err := mover.Run(ctx, mover.Options{
			Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
			Slots: set, Logger: testLogger(t),
		})
		counts, cerr := cluster.CountKeys(ctx, target, set.Slots())
		close(done)
		at := <-flushed
		if cerr != nil {
			t.Fatal(cerr)
		}
		var left int64
		for _, n := range counts {
			left += n
		}
		if at < 0 {
			t.Fatalf("the flush never happened (move %s: %v)", sum.Result, err)
		}
		if ferr := <-flushErr; ferr != nil {
			t.Fatalf("FLUSHALL on the source: %v (move %s: %v)", ferr, sum.Result, err)
		}
		if sum.Result != mover.ResultRolledBack || left != 0 {
			t.Fatalf("FLUSHALL when the target held %d keys: move %s (%v); the target keeps %d keys of the slots", at, sum.Result, err, left)
		}
		t.Logf("FLUSHALL when the target held %d keys: rolled back (%v), target empty", at, err)
	}
}

// The README says FLUSHDB on the source
// cancels the move (rolled back), like FLUSHALL. The move is held in
// catch-up; FLUSHDB on the source must end it rolled back with
// ErrSourceFlushed, the target holding no key of the slots and no mark,
// the source still their owner (flushed, as asked), within a bound (a
// missed FLUSHDB would hold the move until its deadline).
func TestFlushDBCancelsMove(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
	set := mustSlots(t, "0-5460")
	load(t, cc, 2_000, set)
	source := nodeClient(t, c, 0)
	target := nodeClient(t, c, 3)
	done, cancel := moveHeldInCatchUp(t, c, set)
	defer cancel()
	if err := source.FlushDB(ctx).Err(); err != nil {
		cancel()
		<-done
		t.Fatalf("FLUSHDB on the source: %v", err)
	}
	var sum mover.Summary
	select {
	case sum = <-done:
	case <-time.After(20 * time.Second):
		cancel()
		sum = <-done
		t.Fatalf("the move did not notice FLUSHDB within 20s; cancelled: %s (%s)", sum.Result, sum.Error)
	}
	if sum.Result != mover.ResultRolledBack || !strings.Contains(sum.Error, mover.ErrSourceFlushed.Error()) {
		t.Fatalf("move: %s (%s); want rolled back with %q", sum.Result, sum.Error, mover.ErrSourceFlushed)
	}
	if sum.KeysCopied == 0 {
		t.Fatal("the move copied nothing before the FLUSHDB: the rollback removed nothing")
	}
	assertTargetHoldsNone(t, ctx, target, set)
	must(t, c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second))
	if n, err := source.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the source holds %d keys after its FLUSHDB (%v)", n, err)
	}
	assertNoOrphans(t, c)
	t.Logf("move: %s: %s", sum.Result, sum.Error)
}

// assertTargetHoldsNone fails unless the target holds no key of the slots:
// a rolled-back move removed every key it had copied.
func assertTargetHoldsNone(t *testing.T, ctx context.Context, target *redis.Client, set *slots.Set) {
	t.Helper()
	counts, err := cluster.CountKeys(ctx, target, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range counts {
		if n != 0 {
			t.Fatalf("the rolled-back target keeps %d keys of slot %d", n, set.Slots()[i])
		}
	}
}
