package cutover

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// Keys of an importing slot that expired after CLUSTER GETKEYSINSLOT listed
// them make a multi-key UNLINK fail with TRYAGAIN; the purge must still
// remove every key (and only those: the node's own key stays).
func TestPurgeSurvivesExpiredKeys(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-16382", "16383"}, localcluster.Options{})
	node := c.Nodes[1].Client()
	defer node.Close()
	const slot = 100
	tag := tagOf(slot)
	own := "{" + tagOf(16383) + "}:own"
	if err := node.Set(ctx, own, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Expired keys stay in the keyspace until something looks at them.
	if err := node.Do(ctx, "DEBUG", "SET-ACTIVE-EXPIRE", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.IDs[0]).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 50; i++ {
			ttl := time.Duration(0)
			if i%5 == 0 {
				ttl = time.Millisecond
			}
			p.Do(ctx, "ASKING")
			p.Set(ctx, fmt.Sprintf("{%s}:%d", tag, i), "v", ttl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	removed, err := Rollback(ctx, node, slots.NewSet(slots.Range{Start: slot, End: slot}), Pace{Batch: 100})
	if err != nil {
		t.Fatalf("rollback: %v (removed %d)", err, removed)
	}
	if n := node.ClusterCountKeysInSlot(ctx, slot).Val(); n != 0 || removed != 40 {
		t.Fatalf("%d keys left in the slot, %d removed (want 0 and the 40 that had not expired)", n, removed)
	}
	if node.Exists(ctx, own).Val() != 1 {
		t.Fatal("the purge removed a key of a slot it was not given")
	}
	// Nor may it leave TRYAGAIN in the operator's error statistics.
	if stats := node.Info(ctx, "errorstats").Val(); strings.Contains(stats, "TRYAGAIN") {
		t.Fatalf("the purge drew TRYAGAIN errors:\n%s", stats)
	}
}

// tagOf returns a hash tag that lands in slot.
func tagOf(slot uint16) string {
	for i := 0; ; i++ {
		if slots.ForString(fmt.Sprint(i)) == slot {
			return fmt.Sprint(i)
		}
	}
}

// keysIn returns n keys of the slots of set.
func keysIn(set *slots.Set, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint("k", i); set.Contains(slots.ForString(k)) {
			keys = append(keys, k)
		}
	}
	return keys
}

// A node whose keys all belong to the moved slots is emptied in one step
// (a rolled-back target here); one key of another slot makes the cleanup
// fall back to the paced purge, which must leave that key alone.
func TestPurgeFlushesOnlyANodeOfMovedKeys(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383"}, localcluster.Options{})
	src, dst := c.Nodes[0].Client(), c.Nodes[1].Client()
	defer src.Close()
	defer dst.Close()
	moved := slots.NewSet(slots.Range{Start: 0, End: 99})
	keys := keysIn(moved, 300)
	write := func(c *redis.Client, asking bool) {
		t.Helper()
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				if asking {
					p.Do(ctx, "ASKING")
				}
				p.Set(ctx, k, "v", 0)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	flushes := func(c *redis.Client) int64 {
		t.Helper()
		n, err := localcluster.CommandStat(ctx, c, "flushdb", "calls")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	setSlots := func(c *redis.Client, how ...any) {
		t.Helper()
		for s := 0; s <= 99; s++ {
			if err := c.Do(ctx, append([]any{"CLUSTER", "SETSLOT", s}, how...)...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The target holds nothing but the imported keys: one flush.
	setSlots(dst, "IMPORTING", c.IDs[0])
	write(dst, true)
	removed, err := Rollback(ctx, dst, moved, Pace{})
	if err != nil || removed != 300 {
		t.Fatalf("rollback: removed %d, %v (want 300)", removed, err)
	}
	top, err := cluster.Load(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if n := dst.DBSize(ctx).Val(); n != 0 || flushes(dst) != 1 || len(top.Myself.Importing) != 0 {
		t.Fatalf("after rollback: %d keys, %d FLUSHDB, importing %v (want 0, 1, none)", n, flushes(dst), top.Myself.Importing)
	}

	// Another move has a connection on the node (its replica link would see
	// the FLUSHDB in the stream and give up): paced, no flush.
	other := c.Nodes[1].Client()
	defer other.Close()
	if err := other.Do(ctx, "CLIENT", "SETNAME", cluster.NamePrefix+"another-move").Err(); err != nil {
		t.Fatal(err)
	}
	setSlots(dst, "IMPORTING", c.IDs[0])
	write(dst, true)
	if removed, err := Rollback(ctx, dst, moved, Pace{}); err != nil || removed != 300 || flushes(dst) != 1 || dst.DBSize(ctx).Val() != 0 {
		t.Fatalf("rollback beside another move: removed %d, %v; %d FLUSHDB (want 300, the one before)", removed, err, flushes(dst))
	}
	other.Close()

	// The source keeps a key of its own beside the orphans: paced.
	write(src, false)
	if err := src.Set(ctx, "{kept}", "mine", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "CLUSTER", "DELSLOTSRANGE", 0, 99).Err(); err != nil {
		t.Fatal(err)
	}
	setSlots(src, "NODE", c.IDs[1])
	setSlots(dst, "NODE", c.IDs[1])
	// The cleanup's marks name the source itself, never the owner (see
	// Cleanup): watched while it runs, paced slowly.
	marks := make(chan map[uint16]string, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() {
		seen := map[uint16]string{}
		for watchCtx.Err() == nil {
			if top, err := cluster.Load(watchCtx, src); err == nil {
				for s, from := range top.Myself.Importing {
					seen[s] = from
				}
			}
			time.Sleep(time.Millisecond)
		}
		marks <- seen
	}()
	removed, err = Cleanup(ctx, src, c.IDs[1], moved, Pace{Batch: 10, Sleep: 5 * time.Millisecond})
	stopWatch()
	if err != nil || removed != 300 {
		t.Fatalf("cleanup: removed %d, %v (want 300)", removed, err)
	}
	seen := <-marks
	if len(seen) == 0 {
		t.Fatal("no importing mark seen on the source during its cleanup")
	}
	for s, from := range seen {
		if from != c.IDs[0] {
			t.Fatalf("the cleanup marked slot %d importing from %s, not from the source itself (%s)", s, from, c.IDs[0])
		}
	}
	if v, n := src.Get(ctx, "{kept}").Val(), src.DBSize(ctx).Val(); v != "mine" || n != 1 || flushes(src) != 0 {
		t.Fatalf("after cleanup: {kept}=%q, %d keys, %d FLUSHDB (want \"mine\", 1, 0)", v, n, flushes(src))
	}
}

// A rollback never touches slots the target owns by now (another move of
// them finished): their keys are live. The rest it purges as usual.
func TestRollbackLeavesOwnedSlotsAlone(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383"}, localcluster.Options{})
	target := c.Nodes[0].Client()
	defer target.Close()
	live := "{" + tagOf(50) + "}:live"
	imported := "{" + tagOf(9000) + "}:imported"
	if err := target.Set(ctx, live, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := target.Do(ctx, "CLUSTER", "SETSLOT", 9000, "IMPORTING", c.IDs[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		p.Set(ctx, imported, "v", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	set := slots.NewSet(slots.Range{Start: 0, End: 99}, slots.Range{Start: 9000, End: 9000})
	removed, err := Rollback(ctx, target, set, Pace{})
	if err == nil || !strings.Contains(err.Error(), "owns slots 0-99") || removed != 1 {
		t.Fatalf("rollback over owned slots: removed %d, %v", removed, err)
	}
	if target.Exists(ctx, live).Val() != 1 {
		t.Fatal("the rollback removed a live key of a slot the target owns")
	}
	top, err := cluster.Load(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if n := target.ClusterCountKeysInSlot(ctx, 9000).Val(); n != 0 || len(top.Myself.Importing) != 0 {
		t.Fatalf("slot 9000: %d keys left, importing %v", n, top.Myself.Importing)
	}
}

// A node that is briefly down (cluster_state:fail: another move released a
// slot of it with DELSLOTS alone, as on Valkey 8) refuses scripts; the
// purge waits for it to come back instead of leaving the move stuck.
func TestPurgeWaitsOutABriefClusterDown(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-16382", "16383"}, localcluster.Options{})
	node := c.Nodes[1].Client()
	defer node.Close()
	const slot = 100
	if err := node.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.IDs[0]).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 20; i++ {
			p.Do(ctx, "ASKING")
			p.Set(ctx, fmt.Sprintf("{%s}:%d", tagOf(slot), i), "v", 0)
		}
		// A key of its own: the purge is the paced one, by scripts.
		p.Set(ctx, "{"+tagOf(16383)+"}:own", "v", 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Down: its own slot unassigned (full coverage required), for 300 ms.
	if err := node.Do(ctx, "CLUSTER", "DELSLOTS", 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(node.ClusterInfo(ctx).Val(), "cluster_state:fail"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node never went down")
		}
	}
	back := time.AfterFunc(300*time.Millisecond, func() { node.Do(context.Background(), "CLUSTER", "ADDSLOTS", 16383) })
	defer back.Stop()
	removed, err := Rollback(ctx, node, slots.NewSet(slots.Range{Start: slot, End: slot}), Pace{Batch: 100})
	if err != nil || removed != 20 {
		t.Fatalf("rollback on a node down for 300 ms: removed %d: %v", removed, err)
	}
}

// A source that sees the moved slots unassigned (a guarded release on
// Valkey 8 whose news has not reached it) is told their owner before its
// cleanup marks them: the owner's claim, reaching it by gossip during the
// purge, would else clear the marks and fail the purge.
func TestCleanupTellsASourceThatSeesNoOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383"}, localcluster.Options{})
	src, dst := c.Nodes[0].Client(), c.Nodes[1].Client()
	defer src.Close()
	defer dst.Close()
	moved := slots.NewSet(slots.Range{Start: 0, End: 99})
	kept := "{" + tagOf(5000) + "}:kept"
	if _, err := src.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keysIn(moved, 300) {
			p.Set(ctx, k, "v", 0)
		}
		p.Set(ctx, kept, "mine", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, cluster.SlotsCommand("DELSLOTS", moved.Slots())...).Err(); err != nil {
		t.Fatal(err)
	}
	// The owner claims the slots as soon as the source marks one.
	watchCtx, stopWatch := context.WithCancel(ctx)
	claimed := make(chan error, 1)
	go func() {
		for watchCtx.Err() == nil {
			if top, err := cluster.Load(watchCtx, src); err == nil && len(top.Myself.Importing) > 0 {
				claimed <- SetSlots(ctx, dst, moved.Slots(), "NODE", c.IDs[1])
				return
			}
			time.Sleep(time.Millisecond)
		}
		claimed <- nil
	}()
	removed, err := Cleanup(ctx, src, c.IDs[1], moved, Pace{Batch: 10, Sleep: 5 * time.Millisecond})
	stopWatch()
	if cerr := <-claimed; cerr != nil {
		t.Fatalf("the owner's claim: %v", cerr)
	}
	if err != nil || removed != 300 {
		t.Fatalf("cleanup of a source that saw no owner: removed %d, %v (want 300)", removed, err)
	}
	top, err := cluster.Load(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range moved.Slots() {
		if o := top.AssignedTo(s); o == nil || o.ID != c.IDs[1] || top.Myself.Importing[s] != "" {
			t.Fatalf("slot %d in the source's view after the cleanup: owner %v, importing from %q (want %s, none)", s, o, top.Myself.Importing[s], c.IDs[1])
		}
	}
	if v, n := src.Get(ctx, kept).Val(), src.DBSize(ctx).Val(); v != "mine" || n != 1 {
		t.Fatalf("after cleanup: %s=%q, %d keys (want \"mine\", 1)", kept, v, n)
	}
}
