package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	code, stdout, stderr := runCLI(t, "fix", "--node", c.Nodes[1].Addr, "--dry-run")
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
		code, stdout, stderr = runCLI(t, "fix", "--node", c.Nodes[1].Addr)
		if code != 2 || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(stdout, "done: rollback slots 0-5460 on "+c.Nodes[3].Addr) {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	assertUnchanged(t, c, before)
	if code, stdout, _ := runCLI(t, "fix", "--node", c.Nodes[0].Addr); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("second fix: exit %d\n%s", code, stdout)
	}
}

// A move that stopped between the source's release and the target's claim
// is finished forward: the target claims the slots (it holds every key up
// to the fence) and the source's orphans go.
func TestFixFinishesAReleasedMove(t *testing.T) {
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	keys := load(t, cc, 5000, mustSlots(t, "0-99"))
	moved := keysIn(keys, mustSlots(t, "0-99"))
	want, err := harness.Capture(ctx, cc, moved)
	if err != nil {
		t.Fatal(err)
	}
	source, target := c.Nodes[0].Client(), c.Nodes[3].Client()
	defer source.Close()
	defer target.Close()
	// The state a move leaves when it dies right after the release.
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
	release := []any{"CLUSTER", "DELSLOTS"}
	for s := 0; s <= 99; s++ {
		release = append(release, s)
	}
	if err := source.Do(ctx, release...).Err(); err != nil {
		t.Fatal(err)
	}
	for s := 0; s <= 99; s++ {
		if err := source.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", c.IDs[3]).Err(); err != nil {
			t.Fatal(err)
		}
	}

	code, stdout, stderr := runCLI(t, "fix", "--node", c.Nodes[2].Addr)
	if code != 0 || !strings.Contains(stdout, "done: claim slots 0-99 on "+c.Nodes[3].Addr) ||
		!strings.Contains(stdout, " on "+c.Nodes[0].Addr+": orphaned keys") {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := c.WaitOwner(ctx, mustSlots(t, "0-99"), c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := want.Compare(ctx, target); err != nil {
		t.Fatalf("on the target: %v", err)
	}
	for s := 0; s <= 99; s++ {
		if n := source.ClusterCountKeysInSlot(ctx, s).Val(); n != 0 {
			t.Fatalf("the source keeps %d keys of slot %d", n, s)
		}
	}
	if err := harness.CheckWithRedisCli(ctx, c.Nodes[3].Addr); err != nil {
		t.Fatal(err)
	}
}
