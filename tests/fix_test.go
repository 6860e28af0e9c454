package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// A move killed (-9) in its snapshot leaves importing marks and some keys
// on the target. fix refuses while the move is alive, and once it is gone
// it rolls the target back: the cluster is exactly as before the move.
func TestFixUndoesAKilledMove(t *testing.T) {
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	load(t, cc, 5000, mustSlots(t, "0-5460"))
	// Enough plain keys in the moved shard for a snapshot that lasts a while.
	source := c.Nodes[0].Client()
	defer source.Close()
	if _, err := source.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 300_000; i++ {
			p.Set(ctx, fmt.Sprintf("%s:%d", tagIn(mustSlots(t, "0-5460"), i%500), i), strings.Repeat("v", 256), 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}

	move := exec.Command(slotmoverBin, "move", "--source", c.Nodes[0].Addr, "--target", c.Nodes[3].Addr, "--slots", "0-5460", "--window", "10", "--reply-per-key")
	if err := move.Start(); err != nil {
		t.Fatal(err)
	}
	defer move.Process.Kill()
	target := c.Nodes[3].Client()
	defer target.Close()
	deadline := time.Now().Add(30 * time.Second)
	for target.DBSize(ctx).Val() < 1000 {
		if time.Now().After(deadline) {
			t.Fatal("the move never started its snapshot")
		}
		time.Sleep(time.Millisecond)
	}
	code, stdout, stderr := runCLI(t, "fix", "--cluster", c.Nodes[1].Addr, "--dry-run")
	if code != 2 || !strings.Contains(stderr, "a move is under way") {
		t.Fatalf("fix during a live move: exit %d\n%s%s", code, stdout, stderr)
	}
	move.Process.Kill()
	move.Wait()
	if target.DBSize(ctx).Val() == 0 {
		t.Fatal("the killed move left nothing to repair: the test tests nothing")
	}

	// The dead move's connections close with it; give the servers a moment.
	for i := 0; ; i++ {
		code, stdout, stderr = runCLI(t, "fix", "--cluster", c.Nodes[1].Addr)
		if code != 2 || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(stdout, "done: rollback slots 0-5460 on "+c.Nodes[3].Addr) {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	assertUnchanged(t, c, before)
	if code, stdout, _ := runCLI(t, "fix", "--cluster", c.Nodes[0].Addr); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("second fix: exit %d\n%s", code, stdout)
	}
}

// A move that stopped between the source's release and the target's claim
// is given back to the source: the target may lack writes the source
// accepted after the fence (when the write pause did not hold), while the
// source holds every key of the slots as of its release. The source owns
// the slots again, the target keeps none of their keys, and nothing is
// lost, whether the release named the target (Redis 6.2/7.x: DELSLOTS +
// SETSLOT NODE) or left the slots unassigned (Valkey 8: DELSLOTS alone).
func TestFixGivesAReleasedMoveBack(t *testing.T) {
	for _, form := range []string{"setslot", "delslots"} {
		t.Run(form, func(t *testing.T) { fixGivesBack(t, form) })
	}
}

func fixGivesBack(t *testing.T, form string) {
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-99")
	keys := load(t, cc, 5000, set)
	moved := keysIn(keys, set)
	source, target := c.Nodes[0].Client(), c.Nodes[3].Client()
	defer source.Close()
	defer target.Close()
	// The state a move leaves when it dies right after the release: the
	// target imports the slots and holds a copy of their keys...
	for s := 0; s <= 99; s++ {
		if err := target.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", c.IDs[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range moved {
		dump, err := source.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl := source.PTTL(ctx, k).Val()
		if ttl < 0 {
			ttl = 0
		}
		if _, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Restore(ctx, k, ttl, dump)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// ... but not the writes the source accepted last, between the fence
	// and the release (a pause that did not hold): a new key, a changed
	// one, a deleted one.
	late := tagIn(set, 7) + ":late"
	if err := source.Set(ctx, late, "written after the fence", 0).Err(); err != nil {
		t.Fatal(err)
	}
	changed := tagIn(set, 8) + ":changed"
	if err := source.Set(ctx, changed, "old", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		p.Set(ctx, changed, "old", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := source.Set(ctx, changed, "new", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := source.Del(ctx, moved[0]).Err(); err != nil {
		t.Fatal(err)
	}
	moved = append(moved, late, changed)
	// moved[0] is deleted: it must stay so (no copy of the target may
	// resurrect it).
	want, err := localcluster.CaptureMayBeAbsent(ctx, cc, moved)
	if err != nil {
		t.Fatal(err)
	}
	if want.Present() != len(moved)-1 {
		t.Fatalf("%d of the %d keys exist, want all but the deleted one", want.Present(), len(moved))
	}
	release := []any{"CLUSTER", "DELSLOTS"}
	for s := 0; s <= 99; s++ {
		release = append(release, s)
	}
	if err := source.Do(ctx, release...).Err(); err != nil {
		t.Fatal(err)
	}
	if form == "setslot" {
		for s := 0; s <= 99; s++ {
			if err := source.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", c.IDs[3]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	code, stdout, stderr := runCLI(t, "fix", "--cluster", c.Nodes[2].Addr)
	if code != 0 || !strings.Contains(stdout, "done: give-back slots 0-99 on "+c.Nodes[0].Addr+", then rollback on "+c.Nodes[3].Addr) {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("fix:\n%s", stdout)
	if err := c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := want.Compare(ctx, cc); err != nil {
		t.Fatalf("through a cluster client: %v", err)
	}
	if v := cc.Get(ctx, late).Val(); v != "written after the fence" {
		t.Fatalf("%s = %q", late, v)
	}
	if v := cc.Get(ctx, changed).Val(); v != "new" {
		t.Fatalf("%s = %q", changed, v)
	}
	for s := 0; s <= 99; s++ {
		if n := target.ClusterCountKeysInSlot(ctx, s).Val(); n != 0 {
			t.Fatalf("the target keeps %d keys of slot %d", n, s)
		}
	}
	if err := localcluster.CheckWithRedisCli(ctx, c.Nodes[3].Addr); err != nil {
		t.Fatal(err)
	}
	if code, stdout, _ := runCLI(t, "fix", "--cluster", c.Nodes[0].Addr); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("second fix: exit %d\n%s", code, stdout)
	}
}

// The target of a move dies between the release and the claim, and its
// replica takes over its slots (not the released ones: they were never
// claimed). The source's own view names the dead target as the slots'
// owner; nobody claims them. fix must not remove the source's keys of them,
// which are the only complete copy: it leaves them alone and says so.
// Without full coverage required (as many clusters run), the source keeps
// serving its other slots, and would let a cleanup of them through.
func TestFixKeepsKeysWhenTheTargetDies(t *testing.T) {
	opts := localcluster.Options{Config: []string{"cluster-node-timeout 2000", "cluster-require-full-coverage no"}}
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383"}, opts)
	ctx := context.Background()
	opts.Cluster = true
	replica, err := localcluster.StartServer(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	rc := replica.Client()
	defer rc.Close()
	if err := rc.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(c.Nodes[0].Port)).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the replica to know the target", func() bool {
		return rc.Do(ctx, "CLUSTER", "REPLICATE", c.IDs[1]).Err() == nil
	})
	waitFor(t, 20*time.Second, "the replica's link to the target", func() bool {
		return strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up")
	})

	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-99")
	moved := keysIn(load(t, cc, 3000, set), set)
	source, target := c.Nodes[0].Client(), c.Nodes[1].Client()
	defer source.Close()
	defer target.Close()
	for s := 0; s <= 99; s++ {
		if err := target.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", c.IDs[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range moved {
		dump, err := source.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Restore(ctx, k, 0, dump)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := target.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	release := []any{"CLUSTER", "DELSLOTS"}
	for s := 0; s <= 99; s++ {
		release = append(release, s)
	}
	if err := source.Do(ctx, release...).Err(); err != nil {
		t.Fatal(err)
	}
	for s := 0; s <= 99; s++ {
		if err := source.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", c.IDs[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	count := func(c *redis.Client) int64 {
		counts, err := cluster.CountKeys(ctx, c, set.Slots())
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, x := range counts {
			n += x
		}
		return n
	}
	before := count(source)
	if before == 0 {
		t.Fatal("no keys in the slots: the test tests nothing")
	}

	// The target dies; its replica takes over.
	if err := syscall.Kill(c.Nodes[1].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the replica's promotion", func() bool {
		top, err := cluster.Load(ctx, source)
		if err != nil {
			return false
		}
		dead, promoted := top.ByID(c.IDs[1]), top.ByID(rc.ClusterMyID(ctx).Val())
		return dead != nil && dead.Is("fail") && promoted != nil && promoted.Master() && promoted.Slots.Len() > 0
	})
	copies := count(rc)

	code, stdout, stderr := runCLI(t, "fix", "--cluster", c.Nodes[0].Addr)
	t.Logf("fix: exit %d\n%s%s", code, stdout, stderr)
	if n := count(source); n != before {
		t.Fatalf("fix removed %d of the source's %d keys of the slots", before-n, before)
	}
	if n := count(rc); n != copies {
		t.Fatalf("fix removed %d of the promoted replica's %d keys of the slots", copies-n, copies)
	}
	if code != 3 || strings.Contains(stdout, "done:") || !strings.Contains(stdout, "note: "+c.Nodes[0].Addr+" holds") {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A slot imported by two masters (two moves of the same slots, or a source
// restarted after its release) is refused: exit 2, nothing changed, and a
// message that names the nodes and what to check.
func TestFixRefusesASlotImportedTwice(t *testing.T) {
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	load(t, cc, 2000, mustSlots(t, "0-99"))
	for _, i := range []int{1, 3} {
		n := c.Nodes[i].Client()
		err := n.Do(ctx, "CLUSTER", "SETSLOT", 5, "IMPORTING", c.IDs[0]).Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	before, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "fix", "--cluster", c.Nodes[0].Addr)
	// The two importers are named in either order.
	a, b := c.Nodes[1].Addr, c.Nodes[3].Addr
	named := func(x, y string) bool {
		return strings.Contains(stderr, "slot 5: imported by "+x+" (from "+c.Nodes[0].Addr+") and "+y)
	}
	if code != 2 || !strings.Contains(stderr, "conflicting claims, nothing changed") || !(named(a, b) || named(b, a)) {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	assertUnchanged(t, c, before)
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
