package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/tests/harness"
)

// An operator controls a running import three ways: PAUSE with the real
// redis-cli on the admin port, HOLD-CUTOVER over NATS, and resume, budget
// and release-cutover with the slotmover CLI. Paused, the copy stands
// still (the target's key count does not move); held, the task catches up
// and waits in catch-up, the source still the owner; released, it moves
// every key, and a writer loses nothing. Bad controls exit 2.
func TestServeControlsAMove(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := fourMasters(t)
	cc := c.Client()
	defer cc.Close()
	bulkLoad(t, cc, 200_000)
	natsURL := harness.NATS(t)
	d := startDaemon(t, c.Nodes[3].Addr, natsURL, "", "")
	w := startWriter(t, c, 2_000_000)
	id := d.importShard(t)
	target := c.Nodes[3].Client()
	defer target.Close()
	waitCopying(t, ctx, target)

	if out, err := d.cli(t, "CLUSTER", "MIGRATION", "PAUSE", "ID", id); err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("PAUSE: %v %q", err, out)
	}
	nats := []string{"--nats", natsURL, "--node", c.IDs[3]}
	if code, out, errOut := runCLI(t, append([]string{"hold-cutover", id}, nats...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("hold-cutover over NATS: exit %d: %s%s", code, out, errOut)
	}
	time.Sleep(200 * time.Millisecond) // what was in flight lands
	size0 := target.DBSize(ctx).Val()
	time.Sleep(time.Second)
	status, _ := d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
	if size1 := target.DBSize(ctx).Val(); size1 != size0 || !strings.HasPrefix(field(status, "holding"), "paused") || field(status, "cutover_held") != "1" {
		t.Fatalf("paused: the target went from %d to %d keys in 1 s; status:\n%s", size0, size1, status)
	}

	admin := []string{"--admin", d.admin}
	for _, bad := range [][]string{{"resume"}, {"resume", id, "extra"}, {"budget", "fast", id}, {"budget"}, {"pause", "--all", id}} {
		if code, out, errOut := runCLI(t, append(bad, admin...)...); code != 2 || errOut == "" {
			t.Fatalf("%q: exit %d, want 2 with a reason: %s%s", bad, code, out, errOut)
		}
	}
	if code, out, errOut := runCLI(t, append([]string{"resume", id}, admin...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("resume: exit %d: %s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, append([]string{"budget", "max-event=50ms,max-rise=3", "--all"}, nats...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("budget over NATS: exit %d: %s%s", code, out, errOut)
	}
	// Caught up, the task waits for its cutover's release.
	deadline := time.Now().Add(time.Minute)
	for {
		status, _ = d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
		lag, _ := strconv.Atoi(field(status, "lag_bytes"))
		if field(status, "phase") == "catchup" && lag < 256<<10 && field(status, "holding") == "" {
			break
		}
		if time.Now().After(deadline) || field(status, "state") != "running" {
			t.Fatalf("the task never caught up to wait for its cutover:\n%s", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	status, _ = d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
	if field(status, "phase") != "catchup" || field(status, "budget") != "max-event=50ms,max-rise=3" {
		t.Fatalf("with the cutover held, 1 s later:\n%s", status)
	}
	if owner := ownSlots(t, c, 0); !owner.Slots.Contains(0) {
		t.Fatalf("with the cutover held, the source no longer owns slot 0: %v", owner.Slots)
	}
	if code, out, errOut := runCLI(t, append([]string{"release-cutover", id}, admin...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("release-cutover: exit %d: %s%s", code, out, errOut)
	}
	status = d.waitState(t, id, time.Minute, "completed", "failed", "canceled")
	if field(status, "state") != "completed" || field(status, "paused_ms") == "0" {
		t.Fatalf("released:\n%s", status)
	}
	if err := c.WaitOwner(ctx, mustSlots(t, "0-5460"), c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := target.DBSize(ctx).Val(); n < 200_000 {
		t.Fatalf("the target holds %d keys, want the 200000 loaded and the writer's", n)
	}
	assertNoOrphans(t, c)
	w.finish(t)
}
