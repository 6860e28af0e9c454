package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// A move killed (-9) in its snapshot leaves importing marks and some keys
// on the target. fix refuses while the move is alive, and once it is gone
// it rolls the target back: the cluster is exactly as before the move.
func TestFixUndoesAKilledMove(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	load(t, cc, 5000, mustSlots(t, "0-5460"))
	// Enough plain keys in the moved shard for a snapshot that lasts a while.
	source := nodeClient(t, c, 0)
	if _, err := source.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 300_000; i++ {
			p.Set(ctx, fmt.Sprintf("%s:%d", tagIn(mustSlots(t, "0-5460"), i%500), i), strings.Repeat("v", 256), 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := fingerprint(t, ctx, c)

	move := exec.Command(slotmoverBin, "move", "--source", c.Nodes[0].Addr, "--target", c.Nodes[3].Addr, "--slots", "0-5460", "--window", "10", "--reply-per-key")
	if err := move.Start(); err != nil {
		t.Fatal(err)
	}
	defer move.Process.Kill()
	target := nodeClient(t, c, 3)
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
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	set := mustSlots(t, "0-99")
	keys := load(t, cc, 5000, set)
	moved := keysIn(keys, set)
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	// The state a move leaves when it dies right after the release: the
	// target imports the slots and holds a copy of their keys...
	copiedToImporting(t, ctx, source, target, c.IDs[0], set, moved)
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
	must(t, c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second))
	must(t, c.WaitHealthy(ctx, 10*time.Second))
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

	cc := clusterClient(t, c)
	set := mustSlots(t, "0-99")
	moved := keysIn(load(t, cc, 3000, set), set)
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 1)
	copiedToImporting(t, ctx, source, target, c.IDs[0], set, moved)
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
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	load(t, cc, 2000, mustSlots(t, "0-99"))
	for _, i := range []int{1, 3} {
		n := c.Nodes[i].Client()
		err := n.Do(ctx, "CLUSTER", "SETSLOT", 5, "IMPORTING", c.IDs[0]).Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	before := fingerprint(t, ctx, c)
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

// The claims of `slotmover fix` in the README, tested through the binary
// against real servers: --dry-run changes nothing and names what a real
// run then does; --force goes past a move's hanging connections, which
// refuse fix without it; the exit status (0 repaired, 1 a repair failed,
// 2 refused); a master that cannot be reached; a claim (Valkey 8) stopped
// part-way and finished by the next fix.
// fixKeys returns perSlot key names in every slot of set ("{tag}:n", the
// tag hashing to the slot), found by a bounded search.
func fixKeys(t *testing.T, set *slots.Set, perSlot int) []string {
	t.Helper()
	tags := map[uint16]string{}
	for i := 0; i < 5_000_000 && len(tags) < set.Len(); i++ {
		tag := fmt.Sprint("f", i)
		if s := slots.ForString(tag); set.Contains(s) && tags[s] == "" {
			tags[s] = tag
		}
	}
	if len(tags) < set.Len() {
		t.Fatalf("found tags for %d of the %d slots of %s", len(tags), set.Len(), set)
	}
	var keys []string
	for _, s := range set.Slots() {
		for n := 0; n < perSlot; n++ {
			keys = append(keys, fmt.Sprintf("{%s}:%d", tags[s], n))
		}
	}
	return keys
}

// writeFixKeys writes keys of three types (a third with a TTL) through a
// cluster client.
func writeFixKeys(t *testing.T, cc *redis.ClusterClient, keys []string) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < len(keys); start += 500 {
		_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys[start:min(start+500, len(keys))] {
				switch i % 3 {
				case 0:
					p.Set(ctx, k, strings.Repeat("v", 10+i%100), time.Hour)
				case 1:
					p.HSet(ctx, k, "a", i, "b", k)
				default:
					p.RPush(ctx, k, "x", i, k)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// setSlotsOn sends CLUSTER SETSLOT <slot> how… for every slot of set.
func setSlotsOn(t *testing.T, c *redis.Client, set *slots.Set, how ...any) {
	t.Helper()
	ctx := context.Background()
	for _, s := range set.Slots() {
		if err := c.Do(ctx, append([]any{"CLUSTER", "SETSLOT", s}, how...)...).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %v on %s: %v", s, how, c.Options().Addr, err)
		}
	}
}

// stoppedImport leaves the state of a move from node c.Nodes[src] to
// c.Nodes[dst] stopped in its copy: dst imports set from src and holds a
// copy of keys.
func stoppedImport(t *testing.T, c *localcluster.Cluster, src, dst int, set *slots.Set, keys []string) {
	t.Helper()
	copiedToImporting(t, context.Background(), nodeClient(t, c, src), nodeClient(t, c, dst), c.IDs[src], set, keys)
}

// releaseSlots is the source's release of set to c.Nodes[dst], as a move makes
// it: DELSLOTS, then (Redis 6.2 and 7.x) SETSLOT NODE; on Valkey 8 (named
// false) DELSLOTS alone.
func releaseSlots(t *testing.T, c *localcluster.Cluster, src, dst int, set *slots.Set, named bool) {
	t.Helper()
	cl := nodeClient(t, c, src)
	if err := cl.Do(context.Background(), cluster.SlotsCommand("DELSLOTS", set.Slots())...).Err(); err != nil {
		t.Fatalf("DELSLOTS on %s: %v", cl.Options().Addr, err)
	}
	if named {
		setSlotsOn(t, cl, set, "NODE", c.IDs[dst])
	}
}

// plantOrphans leaves copies of keys (of slots c.Nodes[owner] owns) on
// c.Nodes[holder], which neither owns nor imports their slots: what a
// move's cleanup that did not run leaves.
func plantOrphans(t *testing.T, c *localcluster.Cluster, owner, holder int, set *slots.Set, keys []string) {
	t.Helper()
	stoppedImport(t, c, owner, holder, set, keys)
	h := nodeClient(t, c, holder)
	setSlotsOn(t, h, set, "STABLE")
}

// nodeState describes one node as fix must leave it when it changes
// nothing: its own claim and marks (from its own line of CLUSTER NODES),
// the owner and config epoch of every slot in its view, its key count in
// every slot, its key count and the digest of its dataset. Flags and link
// states, which move by themselves, are left out.
func nodeState(ctx context.Context, addr string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	defer cl.Close()
	top, err := cluster.Load(ctx, cl)
	if err != nil {
		return "", err
	}
	all := make([]uint16, slots.Count)
	for i := range all {
		all[i] = uint16(i)
	}
	counts, err := cluster.CountKeys(ctx, cl, all)
	if err != nil {
		return "", err
	}
	size, err := cl.DBSize(ctx).Result()
	if err != nil {
		return "", err
	}
	digest, err := cl.Do(ctx, "DEBUG", "DIGEST").Text()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	me := top.Myself
	fmt.Fprintf(&b, "%s: id=%s dbsize=%d digest=%s\n", addr, me.ID, size, digest)
	fmt.Fprintf(&b, "%s: own line: slots=%s importing=%s migrating=%s\n", addr, me.Slots.String(), markList(me.Importing), markList(me.Migrating))
	// The slot owners it sees and their config epochs (nodes without
	// slots, a replica's role as gossip spreads it, are left out).
	var view []string
	for _, n := range top.Nodes {
		if n.Slots.Len() > 0 {
			view = append(view, fmt.Sprintf("%s: view: %s %s epoch=%d slots=%s", addr, n.ID, n.Addr, n.Epoch, n.Slots.String()))
		}
	}
	slices.Sort(view)
	b.WriteString(strings.Join(view, "\n") + "\n")
	var keys []string
	for i, n := range counts {
		if n > 0 {
			keys = append(keys, fmt.Sprintf("%d:%d", i, n))
		}
	}
	fmt.Fprintf(&b, "%s: keys per slot: %s\n", addr, strings.Join(keys, " "))
	return b.String(), nil
}

func markList(m map[uint16]string) string {
	var out []string
	for s, id := range m {
		out = append(out, fmt.Sprintf("%d:%s", s, id))
	}
	slices.Sort(out)
	return "[" + strings.Join(out, " ") + "]"
}

// clusterState is nodeState of every address, in order.
func clusterState(t *testing.T, addrs []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	for _, a := range addrs {
		st, err := nodeState(ctx, a)
		if err != nil {
			t.Fatalf("state of %s: %v", a, err)
		}
		b.WriteString(st)
	}
	return b.String()
}

// settledState waits (bounded) until two reads of the state, 100 ms apart,
// agree: what gossip still changes must not be blamed on fix.
func settledState(t *testing.T, addrs []string) string {
	t.Helper()
	last := clusterState(t, addrs)
	for i := 0; i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		now := clusterState(t, addrs)
		if now == last {
			return now
		}
		last = now
	}
	t.Fatalf("the cluster's state does not settle within 10 s:\n%s", last)
	return ""
}

// assertSameState fails, naming the lines that differ, unless the state
// of addrs is still before.
func assertSameState(t *testing.T, what string, addrs []string, before string) {
	t.Helper()
	after := clusterState(t, addrs)
	if after == before {
		return
	}
	// Every line names its node: the lines only before, then only after.
	b, a := strings.Split(before, "\n"), strings.Split(after, "\n")
	var diff []string
	for _, l := range b {
		if !slices.Contains(a, l) {
			diff = append(diff, "- "+clipLine(l))
		}
	}
	for _, l := range a {
		if !slices.Contains(b, l) {
			diff = append(diff, "+ "+clipLine(l))
		}
	}
	t.Fatalf("%s changed the cluster:\n%s", what, strings.Join(diff, "\n"))
}

func clipLine(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

// outputLines returns the lines of out that start with prefix, the prefix cut.
func outputLines(out, prefix string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			lines = append(lines, rest)
		}
	}
	return lines
}

// nodeAddrs lists the nodes' addresses.
func nodeAddrs(c *localcluster.Cluster) []string {
	var out []string
	for _, s := range c.Nodes {
		out = append(out, s.Addr)
	}
	return out
}

// keysOn counts the keys a node holds in the slots of set.
func keysOn(t *testing.T, addr string, set *slots.Set) int64 {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	defer cl.Close()
	counts, err := cluster.CountKeys(context.Background(), cl, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, x := range counts {
		n += x
	}
	return n
}

// runFix runs `slotmover fix args…` and logs what it printed.
func runFix(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, append([]string{"fix"}, args...)...)
	t.Logf("slotmover fix %s: exit %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
	return code, stdout, stderr
}

// assertEveryKeyOnce fails unless the masters together hold exactly n
// keys, each in a slot it owns in its own view, with no migrating or
// importing mark left anywhere: every key on its owner, none elsewhere.
func assertEveryKeyOnce(t *testing.T, masters []string, n int) {
	t.Helper()
	ctx := context.Background()
	var total int64
	for _, a := range masters {
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
		top, err := cluster.Load(ctx, cl)
		if err != nil {
			cl.Close()
			t.Fatal(err)
		}
		if len(top.Myself.Importing)+len(top.Myself.Migrating) > 0 {
			cl.Close()
			t.Fatalf("%s keeps marks: importing %s migrating %s", a, markList(top.Myself.Importing), markList(top.Myself.Migrating))
		}
		var foreign []uint16
		for x := 0; x < slots.Count; x++ {
			if !top.Myself.Slots.Contains(uint16(x)) {
				foreign = append(foreign, uint16(x))
			}
		}
		counts, err := cluster.CountKeys(ctx, cl, foreign)
		size := cl.DBSize(ctx).Val()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range counts {
			if k > 0 {
				t.Fatalf("%s holds %d keys of slot %d, which it does not own", a, k, foreign[i])
			}
		}
		total += size
	}
	if total != int64(n) {
		t.Fatalf("the masters hold %d keys in all, want %d (each key once)", total, n)
	}
}

// --dry-run plans and prints, and changes nothing: every node's own claim,
// marks, view of the owners and epochs, key count per slot, key count and
// dataset digest are the same after it. What it prints as "to do" is what
// the real run then reports "done", and the real run does it: a give-back
// (a move stopped between release and claim), a rollback (a move stopped
// in its copy) and a cleanup (orphans of a move whose cleanup never ran).
func TestFixDryRunChangesNothing(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	A, B, C, D := c.Nodes[0].Addr, c.Nodes[1].Addr, c.Nodes[2].Addr, c.Nodes[3].Addr
	rolled, given, orphaned := mustSlots(t, "0-49"), mustSlots(t, "6000-6049"), mustSlots(t, "11000-11009")
	rk, gk, ok := fixKeys(t, rolled, 4), fixKeys(t, given, 4), fixKeys(t, orphaned, 4)
	keys := slices.Concat(rk, gk, ok)
	writeFixKeys(t, cc, keys)
	want := capture(t, ctx, cc, keys)
	stoppedImport(t, c, 0, 3, rolled, rk)
	stoppedImport(t, c, 1, 3, given, gk)
	releaseSlots(t, c, 1, 3, given, true)
	plantOrphans(t, c, 2, 1, orphaned, ok)
	if n := keysOn(t, D, slots.NewSet(slices.Concat(rolled.Ranges(), given.Ranges())...)); n != int64(len(rk)+len(gk)) {
		t.Fatalf("the target holds %d copies, want %d: the state to repair is not built", n, len(rk)+len(gk))
	}

	before := settledState(t, nodeAddrs(c))
	code, stdout, stderr := runFix(t, "--cluster", C, "--dry-run")
	if code != 0 {
		t.Fatalf("fix --dry-run: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	// Nothing changed, on any node, in any way fix could change it.
	assertSameState(t, "fix --dry-run", nodeAddrs(c), before)
	todo := outputLines(stdout, "to do: ")
	if len(outputLines(stdout, "done: ")) > 0 {
		t.Fatalf("fix --dry-run reports repairs done:\n%s", stdout)
	}
	wantTodo := []string{
		"give-back slots 6000-6049 on " + B + ", then rollback on " + D + ": ",
		"rollback slots 0-49 on " + D + ": ",
		"cleanup slots 11000-11009 on " + B + ": ",
	}
	if len(todo) != len(wantTodo) {
		t.Fatalf("fix --dry-run plans %d repairs, want %d (%q):\n%s", len(todo), len(wantTodo), wantTodo, stdout)
	}
	for _, w := range wantTodo {
		if !slices.ContainsFunc(todo, func(l string) bool { return strings.HasPrefix(l, w) }) {
			t.Fatalf("fix --dry-run does not plan %q:\n%s", w, stdout)
		}
	}

	// The real run makes exactly the repairs the dry run named.
	code, stdout, stderr = runFix(t, "--cluster", C)
	if code != 0 {
		t.Fatalf("fix: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if done := outputLines(stdout, "done: "); !slices.Equal(done, todo) {
		t.Fatalf("fix did %q\nthe dry run said it would do %q", done, todo)
	}
	must(t, c.WaitOwner(ctx, rolled, c.IDs[0], 10*time.Second))
	must(t, c.WaitOwner(ctx, given, c.IDs[1], 10*time.Second))
	must(t, c.WaitOwner(ctx, orphaned, c.IDs[2], 10*time.Second))
	must(t, c.WaitHealthy(ctx, 10*time.Second))
	assertEveryKeyOnce(t, nodeAddrs(c), len(keys))
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatalf("after fix, through a cluster client: %v", err)
	}
	if err := localcluster.CheckWithRedisCli(ctx, A); err != nil {
		t.Fatal(err)
	}
}

// A connection named by a move (slotmover:<task>) on any master means the
// move is alive: fix refuses (exit 2), says which task on which node and
// that --force goes on, and changes nothing, dry run or not. With --force
// it repairs although the connection is still open (a move that is gone
// and whose connection hangs), and leaves that connection alone.
func TestFixForceGoesPastAHangingMove(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	C, D := c.Nodes[2].Addr, c.Nodes[3].Addr
	rolled := mustSlots(t, "0-49")
	keys := fixKeys(t, rolled, 4)
	writeFixKeys(t, cc, keys)
	stoppedImport(t, c, 0, 3, rolled, keys)

	// The hanging connection of a move, on a master the repair does not touch.
	hung := nodeClient(t, c, 2)
	conn := hung.Conn()
	defer conn.Close()
	if err := conn.ClientSetName(ctx, "slotmover:ghost-task").Err(); err != nil {
		t.Fatal(err)
	}

	before := settledState(t, nodeAddrs(c))
	for _, args := range [][]string{{"--cluster", D}, {"--cluster", D, "--dry-run"}} {
		code, stdout, stderr := runFix(t, args...)
		if code != 2 {
			t.Fatalf("fix %v with a move's connection open: exit %d, want 2 (refused)\n%s%s", args, code, stdout, stderr)
		}
		if !strings.Contains(stderr, "a move is under way (task ghost-task on "+C+")") || !strings.Contains(stderr, "--force") {
			t.Fatalf("fix %v refused without naming the task, its node and --force:\n%s", args, stderr)
		}
		if strings.Contains(stdout, "done: ") || strings.Contains(stdout, "to do: ") {
			t.Fatalf("fix %v refused, but reports repairs:\n%s", args, stdout)
		}
		assertSameState(t, fmt.Sprintf("fix %v (refused)", args), nodeAddrs(c), before)
	}

	code, stdout, stderr := runFix(t, "--cluster", D, "--force")
	if code != 0 || !strings.Contains(stdout, "done: rollback slots 0-49 on "+D+": ") {
		t.Fatalf("fix --force: exit %d, want 0 and the rollback done\n%s%s", code, stdout, stderr)
	}
	must(t, c.WaitOwner(ctx, rolled, c.IDs[0], 10*time.Second))
	if n := keysOn(t, D, rolled); n != 0 {
		t.Fatalf("after fix --force the target keeps %d keys of slots %s", n, rolled)
	}
	assertEveryKeyOnce(t, nodeAddrs(c), len(keys))
	// --force does not close the move's connection: it only stops waiting for it.
	if list := hung.ClientList(ctx).Val(); !strings.Contains(list, "name=slotmover:ghost-task") {
		t.Fatalf("the move's connection is gone after fix --force:\n%s", list)
	}
	if code, stdout, stderr := runFix(t, "--cluster", D); code != 2 {
		t.Fatalf("fix without --force, the connection still open: exit %d, want 2\n%s%s", code, stdout, stderr)
	}
	conn.Close() // back to its pool, then the pool closes
	hung.Close()
	other := nodeClient(t, c, 2)
	waitFor(t, 10*time.Second, "the move's connection to close", func() bool {
		list, err := other.ClientList(ctx).Result()
		return err == nil && !strings.Contains(list, "name=slotmover:ghost-task")
	})
	if code, stdout, stderr := runFix(t, "--cluster", D); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("fix once the connection is closed: exit %d, want 0 and nothing to repair\n%s%s", code, stdout, stderr)
	}
}

// The exit status: 1 when a repair fails (here a cleanup whose owner's
// replica cannot confirm the keys within --replica-wait: the copies stay),
// with a message naming the repair and "run fix again", and nothing
// changed; 0 once every repair is made; 0 with "nothing to repair" after.
// (2, refused, is asserted by TestFixForceGoesPastAHangingMove.)
func TestFixExitStatus(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	B, D := c.Nodes[1].Addr, c.Nodes[3].Addr
	owner := nodeClient(t, c, 1)

	// B, the owner of the orphans' slots, gets a replica.
	replica := addReplica(t, c, 1)
	rc := replica.Client()
	defer rc.Close()
	// Every master knows it as a replica before it hangs (else fix would
	// take it for a master it cannot read).
	rid := rc.ClusterMyID(ctx).Val()
	waitFor(t, 20*time.Second, "every master to see the replica as one", func() bool {
		for _, a := range nodeAddrs(c) {
			cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
			top, err := cluster.Load(ctx, cl)
			cl.Close()
			if err != nil {
				return false
			}
			if n := top.ByID(rid); n == nil || !n.Is("slave") || n.MasterID != c.IDs[1] {
				return false
			}
		}
		return true
	})

	orphaned := mustSlots(t, "6000-6009")
	keys := fixKeys(t, orphaned, 5)
	writeFixKeys(t, cc, keys)
	plantOrphans(t, c, 1, 3, orphaned, keys)
	if n, err := owner.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for B's replica: %d, %v", n, err)
	}
	// The replica hangs (connected, acknowledging nothing) while B takes a
	// write: it trails B, and a cleanup must not remove the copies.
	if err := syscall.Kill(replica.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			syscall.Kill(replica.PID, syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(resume)
	if err := cc.Set(ctx, fixKeys(t, mustSlots(t, "7000"), 1)[0], "after the replica hung", 0).Err(); err != nil {
		t.Fatal(err)
	}

	before := settledState(t, nodeAddrs(c))
	code, stdout, stderr := runFix(t, "--cluster", B, "--replica-wait", "1s")
	if code != 1 {
		t.Fatalf("fix with a repair that fails: exit %d, want 1\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "cleanup slots 6000-6009 on "+D) || !strings.Contains(stderr, "trail") || !strings.Contains(stderr, "run fix again") {
		t.Fatalf("fix failed without naming the repair, why and what to do:\n%s", stderr)
	}
	if strings.Contains(stdout, "done: ") {
		t.Fatalf("fix failed, but reports repairs done:\n%s", stdout)
	}
	assertSameState(t, "the failed fix", nodeAddrs(c), before)

	resume()
	code, stdout, stderr = runFix(t, "--cluster", B)
	if code != 0 || !strings.Contains(stdout, "done: cleanup slots 6000-6009 on "+D+": ") {
		t.Fatalf("fix with the replica back: exit %d, want 0 and the cleanup done\n%s%s", code, stdout, stderr)
	}
	if n := keysOn(t, D, orphaned); n != 0 {
		t.Fatalf("D keeps %d orphans", n)
	}
	if n := keysOn(t, B, orphaned); n != int64(len(keys)) {
		t.Fatalf("B holds %d keys of %s, want %d", n, orphaned, len(keys))
	}
	assertEveryKeyOnce(t, nodeAddrs(c), len(keys)+1)
	if code, stdout, stderr := runFix(t, "--cluster", B); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("fix after the repairs: exit %d, want 0 and nothing to repair\n%s%s", code, stdout, stderr)
	}
}

// downNode saves the node's dataset (SAVE) and kills it (-9): a master
// whose host went away, its data on disk for restartNode.
func downNode(t *testing.T, s *localcluster.Server) {
	t.Helper()
	cl := s.Client()
	err := cl.Save(context.Background()).Err()
	cl.Close()
	if err != nil {
		t.Fatalf("SAVE on %s: %v", s.Addr, err)
	}
	if err := syscall.Kill(s.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, s.Addr+" to exit", func() bool { return !s.Alive() })
}

// restartNode starts a killed node again from its directory (its
// redis.conf, nodes.conf and dump.rdb): the same port, node ID and data.
// The process is stopped at the test's cleanup.
func restartNode(t *testing.T, s *localcluster.Server) {
	t.Helper()
	out, err := os.OpenFile(filepath.Join(s.Dir, "restart.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(localcluster.ServerBin, filepath.Join(s.Dir, "redis.conf"))
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	cl := s.Client()
	defer cl.Close()
	waitFor(t, 10*time.Second, s.Addr+" to answer again", func() bool {
		select {
		case <-exited:
			t.Fatalf("%s exited at its restart: %s", s.Addr, s.LogTail(5))
		default:
		}
		return cl.Ping(context.Background()).Err() == nil
	})
}

// waitLinked waits (bounded) until every address sees every other node
// connected and not flagged fail or fail?.
func waitLinked(t *testing.T, all []string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 30*time.Second, "every node to see every other connected", func() bool {
		for _, a := range all {
			cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
			top, err := cluster.Load(ctx, cl)
			cl.Close()
			if err != nil || len(top.Nodes) < len(all) {
				return false
			}
			for _, n := range top.Nodes {
				if n != top.Myself && (!n.Connected || n.Failing() || n.Is("handshake")) {
					return false
				}
			}
		}
		return true
	})
}

// A master that cannot be reached. Not involved in any repair: fix makes
// the repairs of the masters it can read, says which master it could not
// read, and the master's data is as it was once it is back. Involved (the
// owner that a target imports from, the owner of orphans): fix leaves
// those slots alone, names the master in its notes, changes nothing on the
// nodes it can reach, and exits 0 (nothing it can do); once the master is
// back, fix repairs everything: every key once, on its owner.
func TestFixWithAMasterDown(t *testing.T) {
	// A node timeout beyond the test's outages: no view flags the downed
	// master fail, so what fix sees is "unreachable" alone, and the
	// cluster state stays ok for the slots that are served.
	opts := localcluster.Options{Config: []string{"cluster-node-timeout 30000", "cluster-require-full-coverage no"}}
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, opts)
	ctx := testContext(t, 3*time.Minute)
	cc := clusterClient(t, c)
	A, B, C, D := c.Nodes[0].Addr, c.Nodes[1].Addr, c.Nodes[2].Addr, c.Nodes[3].Addr
	rolled, orphaned, orphanedA := mustSlots(t, "0-49"), mustSlots(t, "6000-6009"), mustSlots(t, "100-109")
	rk, ok, oka := fixKeys(t, rolled, 4), fixKeys(t, orphaned, 4), fixKeys(t, orphanedA, 4)
	keys := slices.Concat(rk, ok, oka, fixKeys(t, mustSlots(t, "12000-12009"), 4))
	writeFixKeys(t, cc, keys)
	want := capture(t, ctx, cc, keys)

	t.Log("C down, not involved: D imports 0-49 from A, D holds orphans of B's 6000-6009")
	stoppedImport(t, c, 0, 3, rolled, rk)
	plantOrphans(t, c, 1, 3, orphaned, ok)
	cBefore := clusterState(t, []string{C})
	downNode(t, c.Nodes[2])
	code, stdout, stderr := runFix(t, "--cluster", A)
	if code != 3 {
		t.Fatalf("fix with C down: exit %d, want 3 (C left to an operator)\n%s%s", code, stdout, stderr)
	}
	for _, w := range []string{"done: rollback slots 0-49 on " + D + ": ", "done: cleanup slots 6000-6009 on " + D + ": "} {
		if !strings.Contains(stdout, w) {
			t.Fatalf("fix with C down (not involved) did not make the repair %q:\n%s", w, stdout)
		}
	}
	if !strings.Contains(stdout, "note: "+C+" could not be read (") {
		t.Fatalf("fix with C down does not say that it could not read C (%s):\n%s", C, stdout)
	}
	if n := keysOn(t, D, slots.NewSet(slices.Concat(rolled.Ranges(), orphaned.Ranges())...)); n != 0 {
		t.Fatalf("D keeps %d keys after the repairs", n)
	}
	restartNode(t, c.Nodes[2])
	waitLinked(t, nodeAddrs(c))
	// C's claim, view and data are as before: fix did not touch it.
	if now := clusterState(t, []string{C}); now != cBefore {
		t.Fatalf("C changed while it was down:\nbefore\n%s\nafter\n%s", cBefore, now)
	}

	t.Log("A down, involved: D imports 0-49 from A again, B holds orphans of A's 100-109")
	stoppedImport(t, c, 0, 3, rolled, rk)
	plantOrphans(t, c, 0, 1, orphanedA, oka)
	aBefore := clusterState(t, []string{A})
	live := []string{B, C, D}
	downNode(t, c.Nodes[0])
	before := settledState(t, live)
	code, stdout, stderr = runFix(t, "--cluster", B)
	if code != 3 {
		t.Fatalf("fix with A down: exit %d, want 3 (nothing it can do, all left to an operator)\n%s%s", code, stdout, stderr)
	}
	assertSameState(t, "fix with A (involved) down", live, before)
	if strings.Contains(stdout, "done: ") {
		t.Fatalf("fix with A down reports repairs done:\n%s", stdout)
	}
	for _, w := range []string{
		"note: " + D + " imports slots 0-49 from " + A + ", which is unreachable",
		"note: " + B + " holds 40 keys of slots 100-109, which no reachable master claims in its own view (in its view owned by " + A + ", which is unreachable",
		"note: " + A + " could not be read (",
	} {
		if !strings.Contains(stdout, w) {
			t.Fatalf("fix with A down does not say %q:\n%s", w, stdout)
		}
	}

	restartNode(t, c.Nodes[0])
	waitLinked(t, nodeAddrs(c))
	if now := clusterState(t, []string{A}); now != aBefore {
		t.Fatalf("A changed while it was down:\nbefore\n%s\nafter\n%s", aBefore, now)
	}
	code, stdout, stderr = runFix(t, "--cluster", B)
	if code != 0 {
		t.Fatalf("fix with A back: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	for _, w := range []string{"done: rollback slots 0-49 on " + D + ": ", "done: cleanup slots 100-109 on " + B + ": "} {
		if !strings.Contains(stdout, w) {
			t.Fatalf("fix with A back did not make the repair %q:\n%s", w, stdout)
		}
	}
	must(t, c.WaitHealthy(ctx, 20*time.Second))
	// The restarted A serves again (a master's state turns ok a moment
	// after its start).
	waitFor(t, 20*time.Second, "every node's cluster_state:ok", func() bool {
		for _, a := range nodeAddrs(c) {
			cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
			info, err := cl.ClusterInfo(ctx).Result()
			cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	assertRepaired(t, ctx, c, want, len(keys), C)
}

// assertRepaired fails unless the repairs left each of the n keys on
// one master only, every key as want holds it through a fresh cluster
// client, and nothing for fix, run at node, to repair.
func assertRepaired(t *testing.T, ctx context.Context, c *localcluster.Cluster, want *localcluster.KeyStates, n int, node string) {
	t.Helper()
	assertEveryKeyOnce(t, nodeAddrs(c), n)
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatalf("after the repairs, through a cluster client: %v", err)
	}
	if code, stdout, stderr := runFix(t, "--cluster", node); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("fix after the repairs: exit %d, want 0 and nothing to repair\n%s%s", code, stdout, stderr)
	}
}

// useValkey8 makes the test's servers Valkey 8 (where a source's release
// is guarded and fix finishes a stopped move forward with a claim): the
// servers under test if they are, else the build kept beside the
// repository; the test is skipped when there is none.
func useValkey8(t *testing.T) {
	t.Helper()
	if v, err := localcluster.ServerVersion(); err == nil && v.Product == "Valkey" && v.AtLeast(8, 0) {
		return
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "shared", "redis-builds", "valkey-8.0.1", "valkey-server"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipped: a claim is made only on Valkey 8 (a guarded release), and there is no build at %s (set SLOTMOVER_REDIS_SERVER to a valkey-server 8 to run it)", bin)
	}
	was := localcluster.ServerBin
	localcluster.ServerBin = bin
	t.Cleanup(func() { localcluster.ServerBin = was })
}

// On Valkey 8 fix finishes a move stopped after its guarded release
// forward: a claim on the target (fix.RepairClaim: SETSLOT STABLE and NODE
// on the target, slot by slot, not in one transaction; SETSLOT NODE on the
// source; the news to the other masters), then a cleanup of the source's
// copies (marks IMPORTING, UNLINK, STABLE, group by group). A fix stopped
// between any two of those steps leaves a state the next fix finishes:
// here the slots of one move stand at three of those points at once
// (built by hand with the steps' own commands), and one fix must end with
// one owner in every view, every key on it, none left on the source.
func TestFixFinishesAnInterruptedClaim(t *testing.T) {
	useValkey8(t)
	// Full coverage not required: the slots released and not yet claimed
	// do not stop the others from being served (the partial cleanup below
	// needs that), and fix may run before Valkey's gossip claims them.
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{Config: []string{"cluster-require-full-coverage no"}})
	ctx := testContext(t, 3*time.Minute)
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	if guarded, err := cutover.SetSlotBlocks(ctx, source); err != nil || !guarded {
		t.Fatalf("%s is not a server whose release is guarded (Valkey 8): %v", localcluster.ServerBin, err)
	}
	cc := clusterClient(t, c)
	A, D := c.Nodes[0].Addr, c.Nodes[3].Addr
	inClaim, claimed := mustSlots(t, "0-99"), mustSlots(t, "0-49")
	untold := mustSlots(t, "200-299")
	inCleanup, cleaning := mustSlots(t, "400-499"), mustSlots(t, "400-449")
	all := slots.NewSet(slices.Concat(inClaim.Ranges(), untold.Ranges(), inCleanup.Ranges())...)
	keys := fixKeys(t, all, 3)
	writeFixKeys(t, cc, keys)
	want := capture(t, ctx, cc, keys)
	// The move copied every key, and the source released the slots once
	// the target had every write (Valkey 8: DELSLOTS alone).
	stoppedImport(t, c, 0, 3, all, keys)
	releaseSlots(t, c, 0, 3, all, false)
	// 400-499: claimed, the source and the other masters told; the
	// cleanup of the source's copies is built below.
	if err := cutover.Claim(ctx, target, c.IDs[3], inCleanup, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		m := c.Nodes[i].Client()
		err := cutover.SetSlots(ctx, m, inCleanup.Slots(), "NODE", c.IDs[3])
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	// 200-299: claimed, stopped before the source was told.
	if err := cutover.Claim(ctx, target, c.IDs[3], untold, true); err != nil {
		t.Fatal(err)
	}
	// 0-99: stopped inside the target's SETSLOTs, after slot 49 (50-99
	// still imported; Valkey's gossip may give them to the target first).
	if err := cutover.Claim(ctx, target, c.IDs[3], claimed, true); err != nil {
		t.Fatal(err)
	}
	// The source learns that the target owns 0-49 only from the target's
	// own messages: once it knows, it has had the target's claims. Before
	// that, an importing mark on the source could meet a message the
	// target sent before its claims (one that does not claim the slots):
	// Valkey 8 then takes the source for a primary that missed the slots'
	// finalization, and the source takes them over with a new epoch (seen
	// here: it lost them again to the target's next bump and dropped its
	// keys of them as dirty slots). A race of the cleanup's IMPORTING
	// marks with Valkey 8 itself, not the state this test builds.
	waitFor(t, 10*time.Second, "the source to hear of the target's claims", func() bool {
		top, err := cluster.Load(ctx, source)
		if err != nil {
			return false
		}
		for _, s := range slices.Concat(claimed.Slots(), untold.Slots(), inCleanup.Slots()) {
			if o := top.AssignedTo(s); o == nil || o.ID != c.IDs[3] {
				return false
			}
		}
		return true
	})
	// 400-499: the cleanup stopped in its first group: 400-449 marked
	// importing on the source, half their keys unlinked; 450-499 untouched.
	setSlotsOn(t, source, cleaning, "IMPORTING", c.IDs[3])
	half := keysIn(keys, cleaning)
	half = half[:len(half)/2]
	if _, err := source.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range half {
			p.Do(ctx, "ASKING")
			p.Unlink(ctx, k)
		}
		return nil
	}); err != nil {
		t.Fatalf("ASKING + UNLINK on the source: %v\nthe source's log:\n%s", err, c.Nodes[0].LogTail(20))
	}
	if n, want := keysOn(t, A, all), int64(len(keys)-len(half)); n != want {
		t.Fatalf("the source holds %d keys of %s, want %d: the interrupted state is not built", n, all, want)
	}
	if n := keysOn(t, D, all); n != int64(len(keys)) {
		t.Fatalf("the target holds %d keys of %s, want %d", n, all, len(keys))
	}

	code, stdout, stderr := runFix(t, "--cluster", c.Nodes[1].Addr)
	if code != 0 {
		t.Fatalf("fix of the interrupted claim: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "give-back") {
		t.Fatalf("fix gives slots back to the source of a guarded release (it must finish forward):\n%s", stdout)
	}
	done := outputLines(stdout, "done: ")
	hasDone := func(prefix, suffix string) bool {
		return slices.ContainsFunc(done, func(l string) bool { return strings.HasPrefix(l, prefix) && strings.Contains(l, suffix) })
	}
	if !hasDone("rollback slots 400-449 on "+A+": ", "their owner "+D+" never released them") {
		t.Fatalf("fix did not roll back the source's stopped cleanup of 400-449:\n%s", stdout)
	}
	if !hasDone("cleanup slots ", " on "+A+": orphaned keys of slots that "+D+" owns") {
		t.Fatalf("fix did not clean up the source's copies:\n%s", stdout)
	}
	t.Logf("slots 50-99 claimed by fix: %v (else by Valkey's gossip first)", hasDone("claim slots 50-99 on "+D, ""))

	// The source and the target as fix left them, then every view.
	if n := keysOn(t, A, all); n != 0 {
		t.Fatalf("the source keeps %d keys of %s", n, all)
	}
	for _, a := range []string{A, D} {
		if st := clusterState(t, []string{a}); !strings.Contains(st, "importing=[] migrating=[]") {
			t.Fatalf("fix left marks:\n%s", st)
		}
	}
	if n := keysOn(t, D, all); n != int64(len(keys)) {
		t.Fatalf("the target holds %d keys of %s, want %d", n, all, len(keys))
	}
	must(t, c.WaitOwner(ctx, all, c.IDs[3], 10*time.Second))
	must(t, c.WaitHealthy(ctx, 10*time.Second))
	assertRepaired(t, ctx, c, want, len(keys), A)
}

// On Valkey 8 the source releases only at an offset the target reached
// (a guarded release), and a target importing slots that its source no
// longer claims takes them over by gossip. A move stopped right after its
// release is therefore finished forward: fix claims the slots on the
// target (unless gossip got there first) and cleans the source's copies.
// Every key ends on the target, owned by it in every view, and nowhere else.
func TestFixFinishesAGuardedReleaseForward(t *testing.T) {
	c := fourMasters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	source := nodeClient(t, c, 0)
	if guarded, err := cutover.SetSlotBlocks(ctx, source); err != nil || !guarded {
		t.Skipf("only where the release is guarded (Valkey 8): %v", err)
	}
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-99")
	moved := keysIn(load(t, cc, 5000, set), set)
	want := capture(t, ctx, cc, moved)

	opts := mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
	}
	opts.Hooks.AfterRelease = func() error { return errCrash }
	if sum, err := mover.Run(ctx, opts); err == nil {
		t.Fatalf("the move with a crash after its release ended %s with no error", sum.Result)
	}

	code, stdout, stderr := runCLI(t, "fix", "--cluster", c.Nodes[1].Addr)
	if code != 0 {
		t.Fatalf("fix: exit %d\n%s%s", code, stdout, stderr)
	}
	claimed := strings.Contains(stdout, "claim slots 0-99 on "+c.Nodes[3].Addr)
	cleaned := strings.Contains(stdout, " on "+c.Nodes[0].Addr+": orphaned keys of slots that "+c.Nodes[3].Addr+" owns")
	if !cleaned || strings.Contains(stdout, "give-back") {
		t.Fatalf("fix must finish the move forward (claim unless gossip came first, then clean the source):\n%s", stdout)
	}
	t.Logf("fix (claim made by fix: %v, else by gossip):\n%s", claimed, stdout)
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	must(t, c.WaitHealthy(ctx, 10*time.Second))
	// A fresh client: DEBUG DIGEST-VALUE is not routed by its key, and the
	// first one's slot map still names the source, whose copies are gone.
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatalf("after fix, through a cluster client: %v", err)
	}
	for _, s := range set.Slots() {
		if n := source.ClusterCountKeysInSlot(ctx, int(s)).Val(); n != 0 {
			t.Fatalf("the source keeps %d keys of slot %d", n, s)
		}
	}
	if code, stdout, _ := runCLI(t, "fix", "--cluster", c.Nodes[0].Addr); code != 0 || !strings.Contains(stdout, "nothing to repair") {
		t.Fatalf("second fix: exit %d\n%s", code, stdout)
	}
}

var errCrash = errors.New("crashed right after the release (test hook)")

// copiedToImporting makes what a move that died after its copy leaves:
// the target imports set from the source (sourceID) and holds a copy of
// keys with their TTLs, RESTOREd behind ASKING.
func copiedToImporting(t *testing.T, ctx context.Context, source, target *redis.Client, sourceID string, set *slots.Set, keys []string) {
	t.Helper()
	setSlotsOn(t, target, set, "IMPORTING", sourceID)
	harness.CopyKeys(t, ctx, source, target, keys)
}
