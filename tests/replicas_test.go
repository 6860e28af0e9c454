package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// A move with a replica on the source and one
// on the target, under a writer. The target's replica stalls through the
// move (DEBUG SLEEP), so that "the source's copies go only once the
// target's replicas hold every moved key" is put to the test: when the
// move returns, the target's replica must already hold every moved key
// with its content (counted per slot and digested per key, which needs no
// slot map), and once its view has the new owner it serves them with
// READONLY, type, value and TTL as on the source before the move. The
// source's replica served them before the move; after it, it answers MOVED
// to the target and holds none of them. The writer loses nothing and sees
// no ASK or TRYAGAIN.
func TestReplicasOnBothSides(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	// Not the source's whole shard: a master whose last slot goes follows
	// the slots as a replica of the target, and its replica with it.
	set := mustSlots(t, "0-2000")
	moved := keysIn(load(t, cc, 10_000, set), set)
	srcReplica, tgtReplica := addReplica(t, c, 0), addReplica(t, c, 3)
	for _, r := range []*localcluster.Server{srcReplica, tgtReplica} {
		rc := r.Client()
		id, err := rc.ClusterMyID(ctx).Result()
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes, c.IDs = append(c.Nodes, r), append(c.IDs, id)
	}
	must(t, c.WaitHealthy(ctx, 30*time.Second))
	before := capture(t, ctx, cc, moved)
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	digests, err := digestValues(ctx, source, moved)
	if err != nil {
		t.Fatal(err)
	}
	srcRO, tgtRO := readOnlyClient(srcReplica), readOnlyClient(tgtReplica)
	defer srcRO.Close()
	defer tgtRO.Close()
	// The control: the source's replica serves the keys before the move.
	probe := firstString(t, ctx, cc, moved)
	want, err := cc.Get(ctx, probe).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := srcRO.Get(ctx, probe).Result(); err != nil || got != want {
		t.Fatalf("before the move, the source's replica answers %q, %v for %s (READONLY): it should serve it", got, err, probe)
	}

	w := startWriter(t, c, 1_000_000)
	// Valkey 8's claim (SETSLOT) waits for the target's replicas, here the
	// stalled one, for up to 2 s; meanwhile the source, which released
	// with DELSLOTS, answers CLUSTERDOWN for the slots, a node whose view
	// still has the source sends clients back to it with MOVED, and a
	// client's attempts (go-redis counts retries and redirects together)
	// may run out on either. Those writes were refused, not lost.
	srcClient := nodeClient(t, c, 0)
	if guarded, err := cutover.SetSlotBlocks(ctx, srcClient); err != nil {
		t.Fatal(err)
	} else if guarded {
		w.tolerate("CLUSTERDOWN", 20)
		w.tolerate("MOVED", 20)
	}
	stalled := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
			if n, _ := target.DBSize(ctx).Result(); n > 0 {
				stall := tgtReplica.Client()
				defer stall.Close()
				stalled <- stall.Do(ctx, "DEBUG", "SLEEP", "2").Err()
				return
			}
		}
		stalled <- context.DeadlineExceeded
	}()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sum, err := mover.Run(mctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
	})
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	// At once: the target's replica holds every key of the slots that the
	// target holds (no key of them is ever deleted here), and the moved
	// keys' contents. Neither read depends on the replica's slot map.
	tgtCounts, err := cluster.CountKeys(ctx, target, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	replCounts, err := cluster.CountKeys(ctx, tgtRO, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	var short, total int64
	for i := range tgtCounts {
		total += tgtCounts[i]
		if replCounts[i] < tgtCounts[i] {
			short += tgtCounts[i] - replCounts[i]
		}
	}
	if short > 0 {
		t.Fatalf("when the move returned, the target's replica lacked %d of the target's %d keys of the slots", short, total)
	}
	got, err := digestValues(ctx, tgtRO, moved)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range moved {
		if got[i] != digests[i] {
			t.Fatalf("when the move returned, the target's replica held %q with digest %s, the source had %s", k, got[i], digests[i])
		}
	}
	if err := <-stalled; err != nil {
		t.Fatalf("the target's replica was not stalled during the move: %v", err)
	}
	w.finish(t)
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("on the target: %v", err)
	}
	// The target's replica serves them: READONLY reads of every moved key,
	// type, value and TTL, once its view has its master own the slots.
	waitServes(t, ctx, tgtRO, probe, "")
	if err := before.Compare(ctx, tgtRO); err != nil {
		t.Fatalf("on the target's replica (READONLY): %v", err)
	}
	// And it is the target's copy: counters the writer left included.
	if n, err := target.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT on the target: %d replicas, %v", n, err)
	}
	if a, b := target.Do(ctx, "DEBUG", "DIGEST").Val(), tgtRO.Do(ctx, "DEBUG", "DIGEST").Val(); a != b || a == nil {
		t.Fatalf("the target's dataset digest is %v, its replica's %v", a, b)
	}
	// The source's replica no longer serves them: MOVED to the target,
	// and none of their keys left there.
	waitServes(t, ctx, srcRO, probe, c.Nodes[3].Addr)
	waitFor(t, 10*time.Second, "the source's replica to drop the moved keys", func() bool {
		counts, err := cluster.CountKeys(ctx, srcRO, set.Slots())
		if err != nil {
			return false
		}
		for _, n := range counts {
			if n != 0 {
				return false
			}
		}
		return true
	})
	assertNoOrphans(t, c)
	if err := localcluster.CheckWithRedisCli(ctx, c.Nodes[3].Addr); err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %d keys (%d big) with replicas on both sides; pause %.1f ms", sum.KeysCopied, sum.BigKeys, sum.PauseMS)
}

// readOnlyClient is a client of a replica whose connections send READONLY,
// so that it answers reads of its master's slots.
func readOnlyClient(s *localcluster.Server) *redis.Client {
	base := s.Client()
	opts := *base.Options()
	base.Close()
	opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	return redis.NewClient(&opts)
}

// digestValues reads DEBUG DIGEST-VALUE of each key on one node: DEBUG is
// not redirected, so it reads what the node holds whatever its slot map.
func digestValues(ctx context.Context, c *redis.Client, keys []string) ([]string, error) {
	cmds := make([]*redis.Cmd, len(keys))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Do(ctx, "DEBUG", "DIGEST-VALUE", k)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]string, len(keys))
	for i, cmd := range cmds {
		switch v := cmd.Val().(type) {
		case []any:
			if len(v) == 1 {
				out[i] = v[0].(string)
			}
		case string:
			out[i] = v
		}
	}
	return out, nil
}

// firstString is the first string key of keys.
func firstString(t *testing.T, ctx context.Context, cc *redis.ClusterClient, keys []string) string {
	t.Helper()
	for _, k := range keys {
		if typ, err := cc.Type(ctx, k).Result(); err == nil && typ == "string" {
			return k
		}
	}
	t.Fatal("no string key among the moved keys")
	return ""
}

// waitServes waits until a READONLY GET of key on the replica is served
// (movedTo "") or answered MOVED to movedTo; replicas learn a new owner by
// gossip.
func waitServes(t *testing.T, ctx context.Context, ro *redis.Client, key, movedTo string) {
	t.Helper()
	moved := fmt.Sprintf("MOVED %d %s", slots.ForString(key), movedTo)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := ro.Get(ctx, key).Err()
		if movedTo == "" && err == nil || movedTo != "" && err != nil && err.Error() == moved {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a replica still answers GET %s with %v after 10s; want %q", key, err, map[bool]string{true: "a value", false: moved}[movedTo == ""])
		}
	}
}

// On Valkey 8 the claim's last SETSLOT waits for the target's replicas (up
// to 2 s). The source's writers must not wait with it: they are unpaused
// once the source has released the slots and the target claimed all but
// that one. The target's replica is stalled for 2 s right after the
// release; the pause stays far below that (it was 2 s before), and every
// key is on the target.
func TestGuardedClaimDoesNotHoldWritersForTheReplicas(t *testing.T) {
	c, ctx, set, want := guardedMoveSetup(t)
	replica := addReplica(t, c, 3)
	// SETSLOT waits only for the replicas its node's view lists as its own,
	// which gossip tells it a few seconds after the replica attached.
	waitKnowsItsReplica(t, c, 3)
	stall := replica.Client()
	defer stall.Close()
	stalled := make(chan error, 1)
	opts := mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
	}
	opts.Hooks.AfterRelease = func() error {
		go func() { stalled <- stall.Do(context.Background(), "DEBUG", "SLEEP", "2").Err() }()
		time.Sleep(50 * time.Millisecond) // the replica is asleep before the claim
		return nil
	}
	sum, err := mover.Run(ctx, opts)
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	if err := <-stalled; err != nil {
		t.Fatalf("the target's replica was not stalled: %v", err)
	}
	if sum.PauseMS >= 1000 {
		t.Fatalf("the write pause lasted %.0f ms while the target's replica slept 2 s after the release: the claim held the source's writers", sum.PauseMS)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatalf("after the move: %v", err)
	}
	t.Logf("pause %.1f ms with the target's replica asleep", sum.PauseMS)
}

// guardedMoveSetup is the start of a test of what Valkey 8 needs (see
// cutover.SetSlotBlocks), skipped elsewhere: four masters, keys of every
// type, and slots 0-999 of the first to move, whose keys want holds.
func guardedMoveSetup(t *testing.T) (*localcluster.Cluster, context.Context, *slots.Set, *localcluster.KeyStates) {
	t.Helper()
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	source := nodeClient(t, c, 0)
	if guarded, err := cutover.SetSlotBlocks(ctx, source); err != nil || !guarded {
		t.Skipf("only where SETSLOT waits for replicas and cannot go in a script (Valkey 8): %v", err)
	}
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-999")
	want := capture(t, ctx, cc, keysIn(load(t, cc, 5_000, set), set))
	return c, ctx, set, want
}

// waitKnowsItsReplica waits until master i's own view lists one replica of
// it: gossip tells it a few seconds after addReplica returns, and until
// then the master neither waits for it (Valkey 8's SETSLOT) nor has it
// apart from its masters.
func waitKnowsItsReplica(t *testing.T, c *localcluster.Cluster, i int) {
	t.Helper()
	m := nodeClient(t, c, i)
	waitFor(t, 30*time.Second, "a master's view to list its replica", func() bool {
		r, err := m.Do(context.Background(), "CLUSTER", "REPLICAS", c.IDs[i]).Slice()
		return err == nil && len(r) == 1
	})
}
