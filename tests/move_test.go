package tests

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// moveAndCheck moves set from node src to node dst of c with the library
// (the code path of `slotmover move`) and checks the outcome against the
// data: every moved key is on dst as it was, none is left on src, every
// node agrees on the owner, and redis-cli --cluster check is clean.
func moveAndCheck(t *testing.T, c *localcluster.Cluster, src, dst int, set *slots.Set, keys []string, tune ...func(*mover.Options)) mover.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cc := clusterClient(t, c)
	moved := keysIn(keys, set)
	before := capture(t, ctx, cc, moved)
	opts := mover.Options{
		Source: mover.Conn{Addr: c.Nodes[src].Addr},
		Target: mover.Conn{Addr: c.Nodes[dst].Addr},
		Slots:  set,
		Logger: testLogger(t),
	}
	for _, f := range tune {
		f(&opts)
	}
	sum, err := mover.Run(ctx, opts)
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move %s from %s to %s: %s: %v", set, c.Nodes[src].Addr, c.Nodes[dst].Addr, sum.Result, err)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[dst], 10*time.Second))
	target := nodeClient(t, c, dst)
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("on the target itself: %v", err)
	}
	source := nodeClient(t, c, src)
	if role, _ := source.Do(ctx, "ROLE").Slice(); len(role) > 0 && role[0] == "slave" {
		t.Logf("source %s turned into a replica after losing its last slots (replica migration)", c.Nodes[src].Addr)
	} else {
		for _, s := range set.Slots() {
			if n, err := source.ClusterCountKeysInSlot(ctx, int(s)).Result(); err != nil || n != 0 {
				t.Fatalf("source keeps %d keys of slot %d (%v)", n, s, err)
			}
		}
	}
	assertNoOrphans(t, c)
	if err := localcluster.CheckWithRedisCli(ctx, c.Nodes[dst].Addr); err != nil {
		t.Fatal(err)
	}
	if sum.KeysCopied < int64(len(moved)) || sum.TotalMS <= 0 || sum.CutoverAttempts < 1 || sum.NoOwnerMS <= 0 {
		t.Fatalf("summary does not add up (%d keys in the slots): %+v", len(moved), sum)
	}
	t.Logf("moved %s: %d keys (%d big) in %d ms, snapshot %d ms, pause %.1f ms (no owner %.1f ms), %d delta commands, %d orphans removed",
		set, sum.KeysCopied, sum.BigKeys, sum.TotalMS, sum.SnapshotMS, sum.PauseMS, sum.NoOwnerMS, sum.DeltaCommands, sum.OrphansRemoved)
	return sum
}

// assertNoOrphans fails the test if any node holds keys of a slot it does
// not serve (a moved slot's keys left on the source, copies on a node that
// never claimed them).
func assertNoOrphans(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	orphans, err := c.Orphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) > 0 {
		t.Fatalf("%d slots hold keys on a node that does not serve them: %s", len(orphans), strings.Join(orphans[:min(5, len(orphans))], "; "))
	}
}

// The whole shard of the first master moves to the empty one while a
// client writes to every slot; then back; then again. The writer must see
// no ASK, no TRYAGAIN and no error, and lose no write (writer.finish).
func TestMoveShardUnderLoadBackAndAgain(t *testing.T) {
	c := fourMasters(t)
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-5460")
	keys := load(t, cc, 50_000, set)
	ctx := context.Background()
	w := startWriter(t, c, 2_000_000)
	sum := moveAndCheck(t, c, 0, 3, set, keys)
	if sum.BigKeys < 5 || sum.OrphansRemoved < int64(len(keysIn(keys, set))) {
		t.Fatalf("big keys %d, orphans removed %d", sum.BigKeys, sum.OrphansRemoved)
	}
	back := 0
	first := c.Nodes[0].Client()
	if role, _ := first.Do(ctx, "ROLE").Slice(); len(role) > 0 && role[0] == "slave" {
		back = 1 // the drained master became a replica: move to another master
	}
	first.Close()
	moveAndCheck(t, c, 3, back, set, keys)
	moveAndCheck(t, c, back, 3, set, keys)
	if ops := w.finish(t); ops < 100 {
		t.Fatalf("the writer managed only %d writes", ops)
	}
}

// The write pause is not a lock: any client's CLIENT UNPAUSE ends it (a
// second move from the same source, an operator's script). Here a client
// ends every pause of the source as soon as it begins, while another writes
// to every slot: each move must wait for what the source accepted up to its
// release, and no acknowledged write may be lost.
func TestPauseEndedByAnotherClientLosesNoWrite(t *testing.T) {
	c := fourMasters(t)
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-5460")
	keys := load(t, cc, 10_000, set)
	w := startWriter(t, c, 2_000_000)
	// With the pause ended early, writes the source takes after the fence
	// are refused once it releases the slots, and the target sends them
	// back until it has applied them all and claims: clients bounce
	// between the two for those milliseconds, and go-redis gives up after
	// three redirects. Each such error was refused by both nodes (no write
	// happened); a few per move are expected, never lost writes.
	w.tolerate("MOVED", 100)
	stop := unpauseStorm(c.Nodes[0], c.Nodes[3])
	// Three moves at least; more, up to eight, while none has had a write
	// come through its pause: on a starved host the writer may send nothing
	// to the slots in a pause's few milliseconds.
	broken, moves := 0, 0
	for from, to := 0, 3; moves < 3 || (broken == 0 && moves < 8); from, to = to, from {
		moves++
		sum := moveAndCheck(t, c, from, to, set, keys)
		// Writes came through the pause: the release was at a later
		// offset than the fence, or (Valkey 8's guarded release) a
		// release was refused for them and tried again.
		if sum.ReleaseOffset > sum.FenceOffset || sum.ReleaseRefusals > 0 {
			broken++
		}
	}
	unpauses := stop()
	w.finish(t)
	t.Logf("%d CLIENT UNPAUSE sent; %d of %d moves saw writes between the pause and the release (or a release refused for them)", unpauses, broken, moves)
	if broken == 0 {
		t.Fatal("no move saw its pause broken: the test proved nothing")
	}
}

// unpauseStorm sends CLIENT UNPAUSE to the nodes in a loop until stopped
// (at most two minutes); stop returns how many it sent.
func unpauseStorm(nodes ...*localcluster.Server) (stop func() int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var sent atomic.Int64
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := n.Client()
			defer c.Close()
			for ctx.Err() == nil {
				if c.Do(ctx, "CLIENT", "UNPAUSE").Err() == nil {
					sent.Add(1)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	return func() int {
		cancel()
		wg.Wait()
		return int(sent.Load())
	}
}

// Two moves of the same slots into one target that pass each other's check
// for importing marks (on Valkey 8 the marks cannot be checked and set in
// one script): both set the marks, one takes the lock on the target and
// moves, the other is refused before it copies a key, leaving the winner's
// marks. Without the lock both copied and replayed the stream into one
// target. Every key ends on the target once, the loser refused.
func TestSameSlotsIntoOneTargetAtOnce(t *testing.T) {
	c, ctx, set, want := guardedMoveSetup(t)
	opts := func() mover.Options {
		return mover.Options{
			Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
			Slots: set, Logger: testLogger(t),
		}
	}
	// The loser passes its check first and sets its marks only once the
	// winner holds the lock and copies.
	loserChecked, winnerCopies := make(chan struct{}), make(chan struct{})
	var once sync.Once
	loserOpts := opts()
	loserOpts.Hooks.BeforeMarks = func() {
		close(loserChecked)
		select {
		case <-winnerCopies:
		case <-ctx.Done():
		}
	}
	loser := make(chan mover.Summary, 1)
	go func() {
		sum, _ := mover.Run(ctx, loserOpts)
		loser <- sum
	}()
	select {
	case <-loserChecked:
	case sum := <-loser:
		t.Fatalf("the loser ended before its marks: %s: %s", sum.Result, sum.Error)
	}
	winnerOpts := opts()
	// The winner's catch-up waits for the loser's end, so that the loser
	// meets the lock while the winner still copies.
	var lsum mover.Summary
	var waited sync.Once
	winnerOpts.Progress = func(p mover.Progress) {
		if p.KeysCopied > 0 || p.Phase == mover.PhaseCatchUp {
			once.Do(func() { close(winnerCopies) })
		}
		if p.Phase == mover.PhaseCatchUp {
			waited.Do(func() {
				select {
				case lsum = <-loser:
				case <-ctx.Done():
				}
			})
		}
	}
	wsum, err := mover.Run(ctx, winnerOpts)
	once.Do(func() { close(winnerCopies) })
	if err != nil || wsum.Result != mover.ResultMoved {
		t.Fatalf("the winner: %s: %v", wsum.Result, err)
	}
	if lsum.Result != mover.ResultRefused || lsum.KeysCopied != 0 || !strings.Contains(lsum.Error, "holds them") {
		t.Fatalf("the loser: %s, %d keys copied: %s", lsum.Result, lsum.KeysCopied, lsum.Error)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatalf("after the moves: %v", err)
	}
	target := nodeClient(t, c, 3)
	counts, err := cluster.CountKeys(ctx, target, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, k := range counts {
		n += k
	}
	if n != int64(want.Present()) {
		t.Fatalf("the target holds %d keys of the slots, want the %d moved (the lock left behind?)", n, want.Present())
	}
	assertNoOrphans(t, c)
}

// Two moves of the same slots to two different targets, started at the
// same instant or a few milliseconds apart: at most one copies and moves;
// the other is refused (exit 2) before it copies a key, and every key stays
// readable.
func TestOverlappingMovesToTwoTargets(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", "", ""}, localcluster.Options{})
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-2000")
	keys := load(t, cc, 10_000, set)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	before := capture(t, ctx, cc, keysIn(keys, set))
	for round := 0; round < 3; round++ {
		src := slices.Index(c.IDs, ownerOf(t, c, 0))
		targets := []int{3, 4}
		if src >= 3 {
			targets = []int{0, 7 - src} // the other empty master and the first
		}
		start := make(chan struct{})
		sums := make([]mover.Summary, 2)
		var wg sync.WaitGroup
		for i, dst := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Round 0 starts both at once; later rounds stagger them.
				time.Sleep(time.Duration(i*round*5) * time.Millisecond)
				sums[i], _ = mover.Run(ctx, mover.Options{
					Source: mover.Conn{Addr: c.Nodes[src].Addr}, Target: mover.Conn{Addr: c.Nodes[dst].Addr},
					Slots: set, Logger: testLogger(t),
				})
			}()
		}
		close(start)
		wg.Wait()
		moved := 0
		for i, sum := range sums {
			switch sum.Result {
			case mover.ResultMoved:
				moved++
				if err := c.WaitOwner(ctx, set, c.IDs[targets[i]], 10*time.Second); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			case mover.ResultRefused:
				if sum.KeysCopied != 0 {
					t.Fatalf("round %d: the refused move to %s copied %d keys first", round, c.Nodes[targets[i]].Addr, sum.KeysCopied)
				}
				// Refused for the other move's marks, not for anything else.
				if !overlapRefusal.MatchString(sum.Error) {
					t.Fatalf("round %d: the move to %s was refused, but not for the other move of the slots: %s", round, c.Nodes[targets[i]].Addr, sum.Error)
				}
				t.Logf("round %d: the move to %s was refused: %s", round, c.Nodes[targets[i]].Addr, sum.Error)
			default:
				t.Fatalf("round %d: move to %s: %s (%s): the loser must be refused before it copies", round, c.Nodes[targets[i]].Addr, sum.Result, sum.Error)
			}
		}
		if moved > 1 {
			t.Fatalf("round %d: both moves of the same slots succeeded", round)
		}
		// On the owner itself: DEBUG DIGEST-VALUE is not redirected, so a
		// cluster client with a stale slot map would read the old source.
		node := c.Nodes[slices.Index(c.IDs, ownerOf(t, c, 0))].Client()
		err := before.Compare(ctx, node)
		node.Close()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		assertNoOrphans(t, c)
		if err := localcluster.CheckWithRedisCli(ctx, c.Nodes[0].Addr); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// overlapRefusal is how a move is refused because another move of the same
// slots marked them first: seen by the preflight (the other's marks are
// set), by the importing script on the target, or by the check of the
// other masters' views right after this move set its own marks.
var overlapRefusal = regexp.MustCompile(`slot \d+ is importing on \S+ from \S+(: finish or fix that move first| too \(another move of it under way\?\))|slot \d+ is migrating or importing already \(another move of it under way\?\)`)

// The keys of a move exist nowhere but on the target once the source's
// copies are removed: that waits until the target's replicas hold them,
// or a failover right after the move would lose them. Here the target's
// replica stalls through the move; when the move returns (the source's
// copies gone), the replica must hold every key the target holds.
func TestCleanupWaitsForTheTargetsReplicas(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	set := mustSlots(t, "0-5460")
	load(t, cc, 20_000, set)
	replica := addReplica(t, c, 3)
	rc := replica.Client()
	defer rc.Close()
	target := nodeClient(t, c, 3)
	// The replica stalls once the copy has begun (on Valkey 8, marking the
	// slots waits for the target's replicas).
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
			if n, _ := target.DBSize(ctx).Result(); n > 0 {
				rc.Do(ctx, "DEBUG", "SLEEP", "1.5")
				return
			}
		}
	}()
	moveAndCheck(t, c, 0, 3, set, keys(t, cc, set))
	want, err := target.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	replicaRO := redis.NewClient(&redis.Options{Addr: replica.Addr, DisableIdentity: true})
	defer replicaRO.Close()
	got, err := replicaRO.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	<-stalled
	if got != want {
		t.Fatalf("the move returned (the source's copies gone) while the target's replica held %d keys of the target's %d", got, want)
	}
}

// keys lists every key of the cluster in set's slots, from their owners.
func keys(t *testing.T, cc *redis.ClusterClient, set *slots.Set) []string {
	t.Helper()
	var out []string
	var mu sync.Mutex
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); set.Contains(slots.ForString(k)) {
				mu.Lock()
				out = append(out, k)
				mu.Unlock()
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// addReplica starts a cluster node and makes it a replica of c.Nodes[of]
// (localcluster.Cluster.Replicate).
func addReplica(t *testing.T, c *localcluster.Cluster, of int) *localcluster.Server {
	t.Helper()
	r := harness.ServerT(t, localcluster.Options{Cluster: true})
	if err := c.Replicate(context.Background(), r, of); err != nil {
		t.Fatal(err)
	}
	return r
}

// ownerOf is the ID of slot's owner in the first node's view.
func ownerOf(t *testing.T, c *localcluster.Cluster, slot uint16) string {
	t.Helper()
	n := nodeClient(t, c, 0)
	top, err := cluster.Load(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return top.Owner(slot).ID
}

// A spec of several ranges and single slots, spread over two sources' data.
func TestMoveMultiRange(t *testing.T) {
	c := fourMasters(t)
	cc := clusterClient(t, c)
	set := mustSlots(t, "100-200,3000,5000-5100")
	keys := load(t, cc, 50_000, set)
	w := startWriter(t, c, 1_000_000)
	moveAndCheck(t, c, 0, 3, set, keys)
	w.finish(t)
}

// Two moves into the same target from different sources at once, while a
// client writes to every slot: both move, the target holds every key as it
// was, no node keeps keys of a slot it does not serve, and the writer sees
// no ASK, no TRYAGAIN, no error and loses nothing.
func TestConcurrentMovesToOneTarget(t *testing.T) {
	c := fourMasters(t)
	cc := clusterClient(t, c)
	a, b := mustSlots(t, "0-2000"), mustSlots(t, "6000-8000")
	keys := load(t, cc, 20_000, a)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	moved := append(keysIn(keys, a), keysIn(keys, b)...)
	before := capture(t, ctx, cc, moved)
	w := startWriter(t, c, 1_000_000)
	done := make(chan error, 2)
	for _, m := range []struct {
		src int
		set *slots.Set
	}{{0, a}, {1, b}} {
		go func() {
			sum, err := mover.Run(ctx, mover.Options{
				Source: mover.Conn{Addr: c.Nodes[m.src].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
				Slots: m.set, Logger: testLogger(t),
			})
			if err == nil && sum.Result != mover.ResultMoved {
				err = fmt.Errorf("result %s", sum.Result)
			}
			done <- err
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	w.finish(t)
	for _, set := range []*slots.Set{a, b} {
		must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	}
	target := nodeClient(t, c, 3)
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("on the target itself: %v", err)
	}
	assertNoOrphans(t, c)
	if err := localcluster.CheckWithRedisCli(ctx, c.Nodes[3].Addr); err != nil {
		t.Fatal(err)
	}
}

// The tunables of `slotmover move`, each shown to take
// effect in the servers' own records or the summary, in one move:
//
//   - --max-lag 1GiB: while the target's writes are held (CLIENT PAUSE
//     WRITE, by the test) with tens of MB
//     of stream still to apply, far more than the default 256 KiB, a
//     cutover is tried anyway (the source sees CLIENT PAUSE), and misses
//     its fence; the move switches once the target runs again.
//   - --pause-budget 1700ms: every CLIENT PAUSE on the source (its slow
//     log, which logs every command here) asks for 1700 ms; --task-id names
//     the connection that sends it.
//   - --spool-dir: while the target is held, the stream backlog (> the
//     64 MiB a spool keeps in memory) spills to a file the mover holds open
//     there (already unlinked); the directory is empty at the end.
//   - --chunk 250 with --big-key-elements 1000 and --chunk-time 1s (so
//     the element cap, not the time, sizes the commands): each big list,
//     set, hash and zset of 3000 elements reaches the target as 12
//     RPUSH/SADD/HSET/ZADD calls (its commandstats).
//   - --reply-per-key: the target never gets CLIENT REPLY (commandstats).
//   - --cleanup-batch 4: every UNLINK script the cleanup sends to the
//     source (slow log) names at most 4 keys, and all of them add up to the
//     orphans removed; --cleanup-sleep 150ms: the cleanup lasts at least
//     150 ms per round after the first.
//
// Every moved key (the backlog's included) is then asserted on the target,
// and every node's view names it.
func TestMoveTunables(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "100-300")
	tag := tagIn(set, 7)
	const bigN, chunk, batch, sleep, budget = 3000, 250, 4, 150 * time.Millisecond, 1700 * time.Millisecond
	filled, err := localcluster.FillEveryType(ctx, cc, tag, localcluster.FillOptions{Small: 1, BigElements: bigN, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// A key the source keeps: its cleanup is paced, not one FLUSHDB.
	if err := cc.Set(ctx, tagIn(mustSlots(t, "4000-5460"), 1)+":kept", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	for _, kv := range [][2]string{{"slowlog-max-len", "100000"}, {"slowlog-log-slower-than", "0"}} {
		if err := source.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	spool := t.TempDir()
	const taskID = "flags-task"
	cmd := exec.Command(slotmoverBin, "move", "--json", "--source", c.Nodes[0].Addr, "--target", c.Nodes[3].Addr, "--slots", set.String(),
		"--task-id", taskID, "--max-lag", strconv.Itoa(1<<30), "--window", "1", "--max-attempts", "1000", "--pause-budget", budget.String(),
		"--big-key-elements", "1000", "--chunk", strconv.Itoa(chunk), "--chunk-time", "1s", "--reply-per-key",
		"--cleanup-batch", strconv.Itoa(batch), "--cleanup-sleep", sleep.String(), "--spool-dir", spool)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := map[int]bool{} // pid → SIGSTOPped: continued at cleanup whatever happens
	stop := func(pid int) {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped[pid] = true
	}
	cont := func(pid int) {
		syscall.Kill(pid, syscall.SIGCONT)
		delete(stopped, pid)
	}
	t.Cleanup(func() {
		for pid := range stopped {
			cont(pid)
		}
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nslotmover's stderr:\n%s", append(args, stderr.String())...)
	}
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(d); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				fail("waited %s for %s", d, what)
			}
		}
	}

	// The mover is held as soon as the source sees it as a replica, until
	// the source has forked for its snapshot: what is written then goes
	// into the stream, behind the snapshot.
	waitFor("the mover's replica link on the source", 30*time.Second, func() bool { return replicaState(t, source) != "" })
	stop(cmd.Process.Pid)
	waitFor("the source's snapshot fork", 10*time.Second, func() bool {
		s := replicaState(t, source)
		return s != "wait_bgsave" && s != ""
	})
	counter, blob := tag+":backlog:counter", tag+":backlog:blob"
	const incrs, blobs = 20_000, 80
	for i := 0; i < incrs; i += 1000 {
		p := source.Pipeline()
		for j := 0; j < 1000; j++ {
			p.Incr(ctx, counter)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < blobs; i++ {
		if err := source.Set(ctx, blob, strings.Repeat(string(rune('a'+i%26)), 1<<20), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	keys := append(filled, counter, blob)
	before := capture(t, ctx, source, keys)
	if err := source.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	pausesBefore := commandCalls(t, source, "client|pause")
	cont(cmd.Process.Pid)

	// The target is held as soon as the stream reaches it (the counter
	// appears there), with most of the backlog still to come. By name: a
	// count of the slot's keys also sees a big key's replay, which holds
	// the key and its temporary one for a moment.
	slot := int(slots.ForString(counter))
	waitFor("the stream to reach the target", 60*time.Second, func() bool {
		keys, err := target.ClusterGetKeysInSlot(ctx, slot, len(filled)+10).Result()
		return err == nil && slices.Contains(keys, counter)
	})
	// Its writes are held (CLIENT PAUSE WRITE): it still answers the
	// mover's INFO, but applies nothing.
	if err := target.Do(ctx, "CLIENT", "PAUSE", 20_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	paused := true
	unpause := func() {
		if paused {
			paused = false
			if err := target.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Errorf("CLIENT UNPAUSE on the target: %v", err)
			}
		}
	}
	defer unpause()
	// --spool-dir: the backlog spills to a file the mover holds there.
	var spoolFiles []string
	waitFor("a spool file held open by the mover", 10*time.Second, func() bool {
		spoolFiles = openSpoolFiles(t, cmd.Process.Pid)
		return len(spoolFiles) > 0
	})
	for _, f := range spoolFiles {
		if filepath.Dir(strings.TrimSuffix(f, " (deleted)")) != spool {
			fail("the mover spools to %s, not under --spool-dir %s", f, spool)
		}
	}
	// --max-lag: a cutover is tried while the target trails by far more
	// than the default.
	waitFor(fmt.Sprintf("a cutover attempt (CLIENT PAUSE on the source) while the held target trails by %s (--max-lag %d; the default 256 KiB would wait)",
		lagOf(source), 1<<30), 15*time.Second, func() bool { return commandCalls(t, source, "client|pause") > pausesBefore })
	unpause()

	select {
	case <-exited:
	case <-ctx.Done():
		fail("the move did not end")
	}
	sum := parseSummary(t, cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
	if cmd.ProcessState.ExitCode() != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(filled)) || sum.CutoverAttempts < 2 {
		fail("exit %d, result %q, %d keys copied (want %d), %d cutover attempts (want 2 or more: one missed while the target was held)",
			cmd.ProcessState.ExitCode(), sum.Result, sum.KeysCopied, len(filled), sum.CutoverAttempts)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move, on the target: %v", err)
	}
	if orphans, err := c.Orphans(ctx); err != nil || len(orphans) > 0 {
		t.Fatalf("keys left behind (%v): %v", err, orphans)
	}

	// --spool-dir: nothing left there.
	if left, err := os.ReadDir(spool); err != nil || len(left) > 0 {
		t.Fatalf("--spool-dir %s holds %v after the move (%v)", spool, left, err)
	}
	// --chunk: each big collection replayed in ceil(3000/250) commands.
	want := int64(math.Ceil(float64(bigN) / chunk))
	for _, command := range []string{"rpush", "sadd", "hset", "zadd"} {
		if n := commandCalls(t, target, command); n != want {
			t.Errorf("--chunk %d: the target ran %s %d times for a big key of %d elements, want %d", chunk, strings.ToUpper(command), n, bigN, want)
		}
	}
	if sum.BigKeys != 5 {
		t.Errorf("--big-key-elements 1000: %d big keys replayed, want the 5 of %d elements", sum.BigKeys, bigN)
	}
	// --reply-per-key: the target's replies were never turned off.
	if n := commandCalls(t, target, "client|reply"); n != 0 {
		t.Errorf("--reply-per-key: the target ran CLIENT REPLY %d times, want none", n)
	}
	// --pause-budget, --task-id, --cleanup-batch, --cleanup-sleep: the source's slow log.
	log, err := source.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	pauses, rounds, unlinked := 0, 0, int64(0)
	for _, e := range log {
		args := e.Args
		switch {
		case len(args) >= 3 && strings.EqualFold(args[0], "client") && strings.EqualFold(args[1], "pause"):
			pauses++
			if args[2] != strconv.FormatInt(budget.Milliseconds(), 10) {
				t.Errorf("--pause-budget %s: the source was sent %q", budget, strings.Join(args, " "))
			}
			if e.ClientName != "slotmover:"+taskID {
				t.Errorf("--task-id %s: the pause came from a connection named %q", taskID, e.ClientName)
			}
		case len(args) > 3 && strings.EqualFold(args[0], "eval") && strings.Contains(args[1], "UNLINK"):
			rounds++
			if n := len(args) - 3; n > batch {
				t.Errorf("--cleanup-batch %d: one cleanup round trip removed %d keys: %q", batch, n, args[3:])
			}
			unlinked += int64(len(args) - 3)
		}
	}
	if pauses < 2 {
		t.Errorf("the source's slow log holds %d CLIENT PAUSE, want one per cutover attempt (%d)", pauses, sum.CutoverAttempts)
	}
	if unlinked != sum.OrphansRemoved || unlinked != int64(len(keys)) {
		t.Errorf("the cleanup's UNLINK scripts named %d keys, the summary says %d orphans removed, %d keys were moved", unlinked, sum.OrphansRemoved, len(keys))
	}
	if least := time.Duration(rounds-1) * sleep; time.Duration(sum.CleanupMS)*time.Millisecond < least {
		t.Errorf("--cleanup-sleep %s: %d cleanup rounds took %d ms, less than the %s of sleeps between them", sleep, rounds, sum.CleanupMS, least)
	}
	t.Logf("%d cutover attempts (pause budget %s), %d cleanup rounds in %d ms, spool %v", sum.CutoverAttempts, budget, rounds, sum.CleanupMS, spoolFiles)
}

// replicaState is the state of the source's first replica ("" for none).
func replicaState(t *testing.T, c *redis.Client) string {
	t.Helper()
	f, err := info.Read(context.Background(), c, "replication")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(f["slave0"], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "state" {
			return v
		}
	}
	return ""
}

// commandCalls reads the calls of a command in a node's commandstats.
func commandCalls(t *testing.T, c *redis.Client, command string) int64 {
	t.Helper()
	n, err := localcluster.CommandStat(context.Background(), c, command, "calls")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openSpoolFiles lists the spool files process pid holds open.
func openSpoolFiles(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.Contains(filepath.Base(target), "slotmover-spool-") {
			out = append(out, target)
		}
	}
	return out
}

// lagOf describes the source's offset, for a message.
func lagOf(c *redis.Client) string {
	f, err := info.Read(context.Background(), c, "replication")
	if err != nil {
		return "?"
	}
	return "a stream at offset " + f["master_repl_offset"]
}
