package tests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/tests/harness"
)

// mirrored runs every operation on the cluster and on a standalone mirror,
// so that the mirror holds what the cluster must hold afterwards.
type mirrored struct {
	mu     sync.Mutex // the cluster and the mirror see writes in one order
	cc     *redis.ClusterClient
	mirror *redis.Client
	keys   map[string]bool
}

// newMirrored is a mirror server beside cc's cluster. Its client of the
// cluster follows redirections and waits out a node that is down for
// longer than go-redis does by default: a command refused so ran nothing,
// and an application would try it again. (Valkey 8's source answers
// CLUSTERDOWN from its DELSLOTS release until it hears of the owner.)
func newMirrored(t *testing.T, cc *redis.ClusterClient) *mirrored {
	mirror := harness.ServerT(t, localcluster.Options{}).Client()
	t.Cleanup(func() { mirror.Close() })
	opts := *cc.Options()
	opts.MaxRedirects, opts.MaxRetries = 16, 64
	opts.MinRetryBackoff, opts.MaxRetryBackoff = time.Millisecond, 50*time.Millisecond
	patient := redis.NewClusterClient(&opts)
	t.Cleanup(func() { patient.Close() })
	return &mirrored{cc: patient, mirror: mirror, keys: map[string]bool{}}
}

func (m *mirrored) do(ctx context.Context, keys []string, op func(c redis.Cmdable) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		m.keys[k] = true
	}
	if err := op(m.cc); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return op(m.mirror)
}

// Multi-key writes on moving slots (which an importing target refuses
// unless every key exists), MULTI blocks and scripts, all through the move,
// on both snapshot paths: the target ends exactly like a mirror that saw
// the same writes.
func TestMultiKeyWritesDuringMove(t *testing.T) {
	onBothPaths(t, multiKeyWritesDuringMove)
}

// loadForPath loads n keys for a move of set by path: the big keys in set
// on the RDB path, and elsewhere on the keys path (which reads no big list
// or stream), whose source then keeps a backlog.
func loadForPath(t *testing.T, ctx context.Context, c *localcluster.Cluster, cc *redis.ClusterClient, n int, set *slots.Set, path string) {
	t.Helper()
	bigIn := set
	if path == mover.SnapshotKeys {
		bigIn = mustSlots(t, "5461-10922")
		must(t, c.KeepBacklog(ctx))
	}
	load(t, cc, n, bigIn)
}

func multiKeyWritesDuringMove(t *testing.T, path string) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "0-5460")
	loadForPath(t, ctx, c, cc, 10_000, set, path)
	m := newMirrored(t, cc)
	mirror := m.mirror
	var tags []string
	for i := 0; i < 8; i++ {
		tags = append(tags, tagIn(set, 100+i))
	}
	script := redis.NewScript(`redis.call('INCR', KEYS[1]); redis.call('RPUSH', KEYS[2], ARGV[1]); return 1`)

	opsCtx, stopOps := context.WithTimeout(ctx, 2*time.Minute)
	defer stopOps()
	opsErr := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 200_000 && opsCtx.Err() == nil && err == nil; i++ {
			t := tags[i%len(tags)]
			k := func(name string) string { return t + name }
			n := fmt.Sprint(i)
			switch i % 9 {
			case 0:
				err = m.do(ctx, []string{k("a"), k("b")}, func(c redis.Cmdable) error {
					if err := c.Set(ctx, k("a"), n, 0).Err(); err != nil {
						return err
					}
					return c.Rename(ctx, k("a"), k("b")).Err()
				})
			case 1:
				err = m.do(ctx, []string{k("l1"), k("l2")}, func(c redis.Cmdable) error {
					if err := c.RPush(ctx, k("l1"), n, n+"x").Err(); err != nil {
						return err
					}
					return c.LMove(ctx, k("l1"), k("l2"), "LEFT", "RIGHT").Err()
				})
			case 2:
				err = m.do(ctx, []string{k("s1"), k("s2"), k("u")}, func(c redis.Cmdable) error {
					if err := c.SAdd(ctx, k("s1"), n).Err(); err != nil {
						return err
					}
					return c.SUnionStore(ctx, k("u"), k("s1"), k("s2")).Err()
				})
			case 3:
				err = m.do(ctx, []string{k("c1"), k("c2")}, func(c redis.Cmdable) error {
					// go-redis retries no transaction; one refused with
					// CLUSTERDOWN was discarded whole (Valkey 8's instant
					// between release and claim), and an application
					// tries it again.
					for giveUp := time.Now().Add(bounceRetry); ; {
						_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Incr(ctx, k("c1"))
							p.IncrBy(ctx, k("c2"), 2)
							return nil
						})
						if !isUnowned(err) || time.Now().After(giveUp) {
							return err
						}
						time.Sleep(time.Millisecond)
					}
				})
			case 4:
				err = m.do(ctx, []string{k("x"), k("y")}, func(c redis.Cmdable) error {
					return c.MSet(ctx, k("x"), n, k("y"), n).Err()
				})
			case 5:
				err = m.do(ctx, []string{k("x"), k("y")}, func(c redis.Cmdable) error {
					return c.Del(ctx, k("x"), k("y")).Err()
				})
			case 6:
				err = m.do(ctx, []string{k("s1"), k("s2")}, func(c redis.Cmdable) error {
					return c.SMove(ctx, k("s1"), k("s2"), n).Err()
				})
			case 7:
				err = m.do(ctx, []string{k("c1"), k("sl")}, func(c redis.Cmdable) error {
					return script.Run(ctx, c, []string{k("c1"), k("sl")}, n).Err()
				})
			case 8:
				err = m.do(ctx, []string{k("b"), k("copy")}, func(c redis.Cmdable) error {
					return c.Copy(ctx, k("b"), k("copy"), 0, true).Err()
				})
			}
		}
		opsErr <- err
	}()

	time.Sleep(200 * time.Millisecond) // some writes before the sync
	sum, err := mover.Run(ctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), Snapshot: path,
	})
	time.Sleep(200 * time.Millisecond) // and some after the switch
	stopOps()
	if err := <-opsErr; err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		t.Fatalf("workload: %v", err)
	}
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	if sum.KeysResynced == 0 || sum.Snapshot != path {
		t.Fatalf("no key was resynced (the multi-key path was not exercised), or the snapshot took another path than %s (%+v)", path, sum)
	}
	var keys []string
	for k := range m.keys {
		keys = append(keys, k)
	}
	target := nodeClient(t, c, 3)
	// Keys the workload deleted or renamed away must be gone from the
	// target as from the mirror.
	present, err := localcluster.CompareKeysMayBeAbsent(ctx, mirror, target, keys)
	if err != nil {
		t.Fatalf("target differs from the mirror: %v", err)
	}
	if present == 0 {
		t.Fatalf("the mirror holds none of the %d keys the workload wrote: nothing was compared", len(keys))
	}
	t.Logf("%d keys resynced, %d delta commands; %d of %d keys exist, the rest deleted on both", sum.KeysResynced, sum.DeltaCommands, present, len(keys))
}

// A multi-key write that reaches the mover during the cutover's write
// pause is resynced at the fence: the read writes nothing, so the pause
// does not hold it up, and the first attempt switches the slots. (A read
// that wrote a marker waited for the pause to end: the fence was missed,
// the source's writes held for the whole 250 ms, and under steady multi-key
// writes half the attempts failed so, now and then all five of a move.)
func TestResyncDuringThePause(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, time.Minute)
	set := mustSlots(t, "0-99")
	a, b := tagIn(set, 0)+"a", tagIn(set, 0)+"b"
	if err := cc.Set(ctx, a, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	paused := make(chan struct{})
	var pauseOnce sync.Once
	seen := make(chan struct{})
	var seenOnce sync.Once
	var attempts []error
	hooks := mover.Hooks{
		// The mover holds the first RENAME it meets in the stream until
		// the cutover has paused the source's writes.
		Delta: func(u *stream.Command) bool {
			if u.Name() == "RENAME" {
				seenOnce.Do(func() {
					close(seen)
					select {
					case <-paused:
					case <-time.After(20 * time.Second):
					}
				})
			}
			return true
		},
		Fence: func(next cutover.Fence) cutover.Fence {
			return func(ctx context.Context, off int64) error {
				pauseOnce.Do(func() { close(paused) })
				return next(ctx, off)
			}
		},
		OnCutover: func(_ cutover.Result, err error) { attempts = append(attempts, err) },
	}
	// RENAMEs back and forth until the mover meets one in the stream: one
	// every 2 ms, as a move of these few keys reaches its cutover in tens
	// of milliseconds (at one every 20 ms, it often got there first).
	renames := make(chan error, 1)
	last := a
	go func() {
		from, to := a, b
		for i := 0; i < 5000; i++ {
			select {
			case <-seen:
				renames <- nil
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := cc.Rename(ctx, from, to).Err(); err != nil {
				renames <- err
				return
			}
			last, from, to = to, to, from
		}
		renames <- errors.New("the mover never met a RENAME")
	}()
	sum, err := mover.Run(ctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), Hooks: hooks,
		// The path the test was written for: the keys path skips a slot's
		// stream commands until its listing.
		Snapshot: mover.SnapshotRDB,
	})
	if rerr := <-renames; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	if len(attempts) != 1 || attempts[0] != nil || sum.KeysResynced == 0 || sum.PauseMS > 100 {
		t.Fatalf("cutover attempts %v, %d keys resynced, pause %.1f ms: want one attempt, a resync in its pause, and a short pause", attempts, sum.KeysResynced, sum.PauseMS)
	}
	target := nodeClient(t, c, 3)
	gone := a
	if last == a {
		gone = b
	}
	if v, err := target.Get(ctx, last).Result(); err != nil || v != "v" {
		t.Fatalf("target: %s = %q (%v), want \"v\"", last, v, err)
	}
	if n, err := target.Exists(ctx, gone).Result(); err != nil || n != 0 {
		t.Fatalf("target: %s exists (%d, %v) after it was renamed to %s", gone, n, err, last)
	}
}

// A key that expires as a resync reads it is deleted by the source in the
// resync's own transaction, and that DEL comes through the stream after
// the offset the resync was read at: the copy says gone, and the move must
// go on past it, not wait. And a catch-up that never comes close enough
// for a cutover (hot multi-key writes, a target that cannot follow) ends
// at its deadline with a rollback, instead of never.
func TestResyncsOfExpiringAndHotKeys(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	set := mustSlots(t, "0-5460")
	load(t, cc, 5_000, set)
	source := nodeClient(t, c, 0)
	// Keys then expire only when read: by the resync's DUMP, in its MULTI.
	if err := source.Do(ctx, "DEBUG", "SET-ACTIVE-EXPIRE", "0").Err(); err != nil {
		t.Fatal(err)
	}
	tag := tagIn(set, 7)
	// run moves the slots while op runs, for at most burst.
	run := func(name string, src, dst int, opts mover.Options, burst time.Duration, op func(i int) error) mover.Summary {
		t.Helper()
		opsCtx, stop := context.WithTimeout(ctx, burst)
		defer stop()
		opsDone := make(chan error, 1)
		go func() {
			var err error
			for i := 0; i < 1_000_000 && opsCtx.Err() == nil && err == nil; i++ {
				err = op(i)
			}
			opsDone <- err
		}()
		time.Sleep(100 * time.Millisecond)
		mctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		opts.Source, opts.Target = mover.Conn{Addr: c.Nodes[src].Addr}, mover.Conn{Addr: c.Nodes[dst].Addr}
		opts.Slots, opts.Logger = set, testLogger(t)
		sum, err := mover.Run(mctx, opts)
		stop()
		if oerr := <-opsDone; oerr != nil && opsCtx.Err() == nil {
			t.Fatalf("%s: workload: %v", name, oerr)
		}
		t.Logf("%s: %s in %d ms, %d keys resynced (%v)", name, sum.Result, sum.TotalMS, sum.KeysResynced, err)
		return sum
	}
	// A burst of them: while it lasts, resyncs keep the cutover waiting.
	expiring := run("expiring keys", 0, 3, mover.Options{MaxAttempts: 1000}, 1500*time.Millisecond, func(i int) error {
		k := fmt.Sprint(tag, "e", i%50)
		if err := cc.Set(ctx, k, i, time.Millisecond).Err(); err != nil {
			return err
		}
		if err := cc.Rename(ctx, k, k+"r").Err(); err != nil && !strings.Contains(err.Error(), "no such key") {
			return err
		}
		return nil
	})
	if expiring.Result != mover.ResultMoved || expiring.KeysResynced == 0 {
		t.Fatalf("move under renames of expiring keys: %s, %d keys resynced: %s", expiring.Result, expiring.KeysResynced, expiring.Error)
	}
	// On to another master, under an LMOVE that never stops.
	if err := cc.RPush(ctx, tag+"l1", 1, 2, 3, 4, 5, 6, 7, 8).Err(); err != nil {
		t.Fatal(err)
	}
	// A fence that is never met stands for a target that never gets close.
	hot := run("hot LMOVE", 3, 1, mover.Options{MaxCatchUp: 2 * time.Second, FenceTimeout: time.Nanosecond, MaxAttempts: 1_000_000}, 2*time.Minute, func(i int) error {
		from, to := tag+"l1", tag+"l2"
		if i%2 == 1 {
			from, to = to, from
		}
		return cc.LMove(ctx, from, to, "LEFT", "RIGHT").Err()
	})
	switch {
	case hot.Result == mover.ResultRolledBack && strings.Contains(hot.Error, "no cutover after"):
		target := nodeClient(t, c, 1)
		assertTargetHoldsNone(t, ctx, target, set)
	default:
		t.Fatalf("move under a hot LMOVE: %s: %s", hot.Result, hot.Error)
	}
}

// WAIT on the source never counts the move as a replica: not for a write
// to a slot that is not moving (the move holds nothing of it), nor for one
// to a moving slot that the target has applied (a cancel takes it back off
// the target). The source's own replica is stopped, so a WAIT that counts
// one is the move's link.
func TestWaitNeverCountsTheMove(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
	set := mustSlots(t, "0-999")
	load(t, cc, 2_000, set)
	source := nodeClient(t, c, 0)
	replica := addReplica(t, c, 0)
	// Stopped only once the source's view has it as its replica: a node it
	// still takes for a master would be one the preflight cannot reach.
	waitKnowsItsReplica(t, c, 0)
	replica.Stop()
	conn := source.Conn()
	defer conn.Close()
	waited := func(key string) int64 {
		t.Helper()
		if err := conn.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Past the link's periodic ACK.
		n, err := conn.Wait(ctx, 1, 1200*time.Millisecond).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	outside := tagIn(mustSlots(t, "1000-5460"), 9) + "waited"
	if n := waited(outside); n != 0 {
		t.Fatalf("WAIT before the move: %d replicas, the stopped replica still counted", n)
	}
	done, cancel := moveHeldInCatchUp(t, c, set)
	defer cancel()
	repl, err := info.Read(ctx, source, "replication")
	if err != nil {
		t.Fatal(err)
	}
	if repl["connected_slaves"] != "1" {
		t.Fatalf("the source sees %s replicas during the move, want the move's link", repl["connected_slaves"])
	}
	if n := waited(outside); n != 0 {
		t.Fatalf("WAIT for a slot that is not moving: %d replicas counted the move", n)
	}
	moving := tagIn(set, 9) + "waited"
	target := nodeClient(t, c, 3)
	tconn := target.Conn()
	defer tconn.Close()
	onTarget := func() bool {
		t.Helper()
		var got *redis.StringCmd
		if _, err := tconn.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			got = p.Get(ctx, moving)
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return got.Val() == "v"
	}
	if n := waited(moving); n != 0 {
		t.Fatalf("WAIT for a moving slot: %d replicas counted the move", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !onTarget() {
		if time.Now().After(deadline) {
			t.Fatal("the target never applied the write (the control)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if sum := <-done; sum.Result != mover.ResultCancelled {
		t.Fatalf("move: %s: %s", sum.Result, sum.Error)
	}
	if n, err := target.ClusterCountKeysInSlot(ctx, int(slots.ForString(moving))).Result(); err != nil || n != 0 {
		t.Fatalf("the cancelled move left %d keys of the write's slot on the target (%v)", n, err)
	}
}

// The README: a transaction or a
// script flagged allow-cross-slot-keys that writes chosen slots and others
// at once "is applied split (its parts end on different nodes)". On a cluster
// source the only such write a client can make is a script flagged
// allow-cross-slot-keys that writes a key of a moving slot and an
// undeclared key of another slot of the same node (a single command, or
// declared keys, across slots are refused with CROSSSLOT, which this test
// shows first); Redis streams its effects as one MULTI block. The move is
// held in catch-up until the script has run.
func TestCrossSlotWriteIntoMovingSlot(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 2*time.Minute)
	set := mustSlots(t, "0-2000")
	moved := keysIn(load(t, cc, 5_000, set), set)
	source := nodeClient(t, c, 0)
	in := tagIn(set, 40) + "in"
	out := tagIn(mustSlots(t, "3000-5460"), 41) + "out"
	for _, k := range []string{in, out} {
		if err := source.Set(ctx, k, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := capture(t, ctx, cc, moved)
	const flagged = "#!lua flags=allow-cross-slot-keys\n"
	// What a cluster source refuses: one command across slots, even in a
	// flagged script, and declared keys across slots.
	if err := source.Eval(ctx, flagged+`return redis.call('MSET', KEYS[1], 'x', ARGV[1], 'x')`, []string{in}, out).Err(); err == nil {
		t.Fatal("a cross-slot MSET inside a script ran on the source")
	}
	if err := source.Eval(ctx, flagged+`return 1`, []string{in, out}).Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script declaring keys of two slots: %v, want CROSSSLOT", err)
	}
	var scriptErr error
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sum, err := moveDuringCatchUp(t, mctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
	}, func() {
		scriptErr = source.Eval(ctx, flagged+`redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', ARGV[2], ARGV[1]); return 1`, []string{in}, "after", out).Err()
	})
	if scriptErr != nil {
		t.Fatalf("the cross-slot script on the source: %v", scriptErr)
	}
	target := nodeClient(t, c, 3)
	// What the README says: the block is applied split and the move
	// completes; the data must be right: the moved key with the script's
	// write on the target, the other key with its own on the source.
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s (%v): a cross-slot script is applied split, the move goes on", sum.Result, err)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
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

// The function libraries of the delta test: one loaded everywhere before
// the move, one during it (on every master, as an operator loads functions
// in a cluster, and on the mirror).
const (
	claimsLibBefore = "#!lua name=claimsbefore\n" +
		"redis.register_function('claims_bump', function(keys, args) redis.call('INCR', keys[1]); redis.call('RPUSH', keys[2], args[1]); return 1 end)"
	claimsLibDuring = "#!lua name=claimsduring\n" +
		"redis.register_function('claims_swap', function(keys, args) local v = redis.call('GET', keys[1]); redis.call('SET', keys[2], v or args[1]); redis.call('HINCRBY', keys[3], 'n', 1); return 1 end)"
)

// Multi-key and group commands beyond the nine
// of TestMultiKeyWritesDuringMove, run during the move's catch-up (held by
// a fence hook until they are done) on keys hash-tagged into the moving
// slots, each on the cluster and on a standalone mirror: ZUNIONSTORE,
// SINTERSTORE, BITOP, PFMERGE, SORT … STORE, GEOSEARCHSTORE, GEORADIUS …
// STORE, RPOPLPUSH, BLMOVE, MSETNX, RENAMENX, XGROUP CREATE, XREADGROUP,
// XACK, XCLAIM, XAUTOCLAIM, EXPIRE, PERSIST, FUNCTION LOAD and FCALL. Every command
// must reach the move's stream (as Redis propagates it), the move must
// succeed, and every key the workload touched must be on the target as on
// the mirror (type, value, TTL within 1 s, stream groups and pending
// entries), deleted ones absent. SWAPDB, refused in cluster mode, is
// checked to be refused. Both snapshot paths; functions where the server
// has them (7.0+).
//
// A stream group's entries-read (XINFO GROUPS) is exact but for one case,
// the README's: on Redis 7.0 and 7.2 and Valkey 7.2 a group read by
// XREADGROUP during the catch-up keeps on the target the entries-read it
// had before the move (and so a lag too long by the entries read since),
// as the server's own replicas do (XREADGROUP propagates as XCLAIM … LASTID, which does not
// carry it; 7.4 and Valkey 8 add XGROUP SETID … ENTRIESREAD). Its
// last-delivered ID, consumers and pending entries are exact there too.
func TestMoreMultiKeyDeltaCommands(t *testing.T) {
	onBothPaths(t, moreMultiKeyDeltaCommands)
}

func moreMultiKeyDeltaCommands(t *testing.T, path string) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "0-2000")
	loadForPath(t, ctx, c, cc, 2_000, set, path)
	v, err := localcluster.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	functions := v.AtLeast(7, 0)
	// The entries-read limitation's servers (see above).
	staleEntriesRead := v.Product == "Redis" && v.AtLeast(7, 0) && !v.AtLeast(7, 4) ||
		v.Product == "Valkey" && !v.AtLeast(8, 0)
	m := newMirrored(t, cc)
	mirror := m.mirror
	loadEverywhere := func(lib string) error {
		if !functions {
			return nil
		}
		// Every master, the empty one too (a cluster client's ForEachMaster
		// skips a master without slots).
		for _, s := range c.Nodes {
			n := s.Client()
			err := n.FunctionLoad(ctx, lib).Err()
			n.Close()
			if err != nil {
				return fmt.Errorf("FUNCTION LOAD on %s: %w", s.Addr, err)
			}
		}
		return mirror.FunctionLoad(ctx, lib).Err()
	}
	if err := loadEverywhere(claimsLibBefore); err != nil {
		t.Fatal(err)
	}
	if !functions {
		t.Logf("%s has no functions: FUNCTION LOAD and FCALL left out", v)
	}
	var readMu sync.Mutex
	readDuring := map[string]bool{} // stream key + " " + group: read by XREADGROUP during the catch-up
	var tags []string
	for i := 0; i < 4; i++ {
		tags = append(tags, tagIn(set, 200+i))
	}
	// Every command once before the move, so that the snapshot holds
	// keys of each kind, then again and again during the catch-up.
	round := func(i int, during bool) error {
		tag := tags[i%len(tags)]
		k := func(name string) string { return tag + name }
		n := fmt.Sprint(i)
		// Explicit stream IDs, the same on both sides.
		id1, id2 := fmt.Sprintf("%d-1", i+1), fmt.Sprintf("%d-2", i+1)
		ops := []struct {
			keys []string
			op   func(c redis.Cmdable) error
		}{
			{[]string{k("z1"), k("z2"), k("zu")}, func(c redis.Cmdable) error {
				if err := c.ZAdd(ctx, k("z1"), redis.Z{Score: float64(i), Member: n}).Err(); err != nil {
					return err
				}
				return c.ZUnionStore(ctx, k("zu"), &redis.ZStore{Keys: []string{k("z1"), k("z2")}, Weights: []float64{1, 2}}).Err()
			}},
			{[]string{k("s1"), k("s2"), k("si")}, func(c redis.Cmdable) error {
				if err := c.SAdd(ctx, k("s1"), n, i%3).Err(); err != nil {
					return err
				}
				if err := c.SAdd(ctx, k("s2"), i%3, i%5).Err(); err != nil {
					return err
				}
				return c.SInterStore(ctx, k("si"), k("s1"), k("s2")).Err()
			}},
			{[]string{k("b1"), k("b2"), k("bo")}, func(c redis.Cmdable) error {
				if err := c.SetBit(ctx, k("b1"), int64(i*7%200), 1).Err(); err != nil {
					return err
				}
				return c.BitOpOr(ctx, k("bo"), k("b1"), k("b2")).Err()
			}},
			{[]string{k("h1"), k("h2"), k("hm")}, func(c redis.Cmdable) error {
				if err := c.PFAdd(ctx, k("h1"), "e"+n).Err(); err != nil {
					return err
				}
				return c.PFMerge(ctx, k("hm"), k("h1"), k("h2")).Err()
			}},
			// SORT … STORE and GEORADIUS … STORE each follow, in one
			// transaction, a multi-key write that makes the move resync
			// their source key: they reach the stream before that resync's
			// marker, so the source key is waiting for its copy, and only
			// the STORE key, which the key specs and 6.2's key range miss
			// and a built-in rule finds, has the move resync the destination.
			{[]string{k("feed"), k("nums"), k("sorted")}, func(c redis.Cmdable) error {
				if err := c.RPush(ctx, k("feed"), i*37%101, i*53%101).Err(); err != nil {
					return err
				}
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.RPopLPush(ctx, k("feed"), k("nums"))
					p.SortStore(ctx, k("nums"), k("sorted"), &redis.Sort{Order: "DESC"})
					return nil
				})
				return err
			}},
			{[]string{k("geo"), k("near")}, func(c redis.Cmdable) error {
				if err := c.GeoAdd(ctx, k("geo"), &redis.GeoLocation{Name: "p" + n, Longitude: 13 + float64(i%10)/10, Latitude: 38 + float64(i%7)/10}).Err(); err != nil {
					return err
				}
				return c.GeoSearchStore(ctx, k("geo"), k("near"), &redis.GeoSearchStoreQuery{
					GeoSearchQuery: redis.GeoSearchQuery{Longitude: 13.3, Latitude: 38.2, Radius: 40, RadiusUnit: "km", Sort: "ASC"}, StoreDist: true}).Err()
			}},
			{[]string{k("geo"), k("geox"), k("nearby")}, func(c redis.Cmdable) error {
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.ZUnionStore(ctx, k("geo"), &redis.ZStore{Keys: []string{k("geo"), k("geox")}})
					p.GeoRadiusStore(ctx, k("geo"), 13.3, 38.2, &redis.GeoRadiusQuery{Radius: 40, Unit: "km", Sort: "ASC", Store: k("nearby")})
					return nil
				})
				return err
			}},
			{[]string{k("l1"), k("l2")}, func(c redis.Cmdable) error {
				if err := c.RPush(ctx, k("l1"), n, n+"x").Err(); err != nil {
					return err
				}
				if err := c.RPopLPush(ctx, k("l1"), k("l2")).Err(); err != nil {
					return err
				}
				return c.BLMove(ctx, k("l2"), k("l1"), "LEFT", "RIGHT", time.Second).Err() // go-redis sends whole seconds; l2 is never empty here
			}},
			{[]string{k("mx1"), k("mx2")}, func(c redis.Cmdable) error {
				if i%3 == 2 {
					return c.Del(ctx, k("mx1"), k("mx2")).Err()
				}
				return c.MSetNX(ctx, k("mx1"), n, k("mx2"), n).Err()
			}},
			{[]string{k("rn1"), k("rn2")}, func(c redis.Cmdable) error {
				if err := c.Set(ctx, k("rn1"), n, 0).Err(); err != nil {
					return err
				}
				err := c.RenameNX(ctx, k("rn1"), k("rn2")).Err()
				if err == nil && i%4 == 3 {
					err = c.Del(ctx, k("rn2")).Err()
				}
				return err
			}},
			{[]string{k("st")}, func(c redis.Cmdable) error {
				if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k("st"), ID: id1, Values: []any{"n", n}}).Err(); err != nil {
					return err
				}
				if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k("st"), ID: id2, Values: []any{"n", n + "b"}}).Err(); err != nil {
					return err
				}
				if i < len(tags) || i%9 == 4 {
					if err := c.XGroupCreate(ctx, k("st"), "g"+n, "0").Err(); err != nil {
						return err
					}
				}
				if i < len(tags) {
					// Read once before the move: its entries-read is 1 in
					// the snapshot.
					return c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g" + n, Consumer: "c0", Streams: []string{k("st"), ">"}, Count: 1, Block: -1}).Err()
				}
				read, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g" + fmt.Sprint(i%len(tags)), Consumer: "c1", Streams: []string{k("st"), ">"}, Count: 3, Block: -1}).Result()
				if err != nil && err != redis.Nil {
					return err
				}
				if len(read) == 1 && len(read[0].Messages) > 0 && during {
					readMu.Lock()
					readDuring[k("st")+" g"+fmt.Sprint(i%len(tags))] = true
					readMu.Unlock()
				}
				if len(read) == 1 && len(read[0].Messages) > 0 {
					if err := c.XAck(ctx, k("st"), "g"+fmt.Sprint(i%len(tags)), read[0].Messages[0].ID).Err(); err != nil {
						return err
					}
				}
				group := "g" + fmt.Sprint(i%len(tags))
				pending, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k("st"), Group: group, Start: "-", End: "+", Count: 1}).Result()
				if err != nil {
					return err
				}
				if len(pending) > 0 {
					if err := c.XClaim(ctx, &redis.XClaimArgs{Stream: k("st"), Group: group, Consumer: "c2", Messages: []string{pending[0].ID}}).Err(); err != nil {
						return err
					}
				}
				return c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: k("st"), Group: group, Consumer: "c3", Start: "0-0", Count: 1}).Err()
			}},
			{[]string{k("ex")}, func(c redis.Cmdable) error {
				if err := c.Set(ctx, k("ex"), n, 0).Err(); err != nil {
					return err
				}
				if err := c.Expire(ctx, k("ex"), time.Hour).Err(); err != nil {
					return err
				}
				if i%2 == 1 {
					return c.Persist(ctx, k("ex")).Err()
				}
				return nil
			}},
		}
		if functions {
			ops = append(ops, struct {
				keys []string
				op   func(c redis.Cmdable) error
			}{[]string{k("fc"), k("fl")}, func(c redis.Cmdable) error {
				return c.FCall(ctx, "claims_bump", []string{k("fc"), k("fl")}, n).Err()
			}})
		}
		if functions && during && i >= len(tags) {
			ops = append(ops, struct {
				keys []string
				op   func(c redis.Cmdable) error
			}{[]string{k("fc"), k("fs"), k("fh")}, func(c redis.Cmdable) error {
				return c.FCall(ctx, "claims_swap", []string{k("fc"), k("fs"), k("fh")}, n).Err()
			}})
		}
		for j, o := range ops {
			if err := m.do(ctx, o.keys, o.op); err != nil {
				return fmt.Errorf("round %d, op %d (%s): %w", i, j, o.keys[0], err)
			}
		}
		return nil
	}
	for i := 0; i < len(tags); i++ {
		if err := round(i, false); err != nil {
			t.Fatal(err)
		}
	}
	readBefore := map[string]groupRead{} // stream key + " " + group, as the snapshot has it
	for _, tag := range tags {
		view, err := streamView(ctx, mirror, tag+"st")
		if err != nil {
			t.Fatal(err)
		}
		for g, r := range view.groups {
			readBefore[tag+"st "+g] = r
		}
	}

	var mu sync.Mutex
	seen := map[string]int{} // commands of the moving slots the stream brought
	var opsErr error
	var rounds int
	var swapErr error
	workload := func() {
		source := nodeClient(t, c, 0)
		swapErr = source.Do(ctx, "SWAPDB", 0, 1).Err()
		if err := loadEverywhere(claimsLibDuring); err != nil {
			opsErr = fmt.Errorf("FUNCTION LOAD during the move: %w", err)
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for i := len(tags); i < 40*len(tags) && time.Now().Before(deadline); i++ {
			if err := round(i, true); err != nil {
				opsErr = err
				return
			}
			rounds++
		}
	}
	mctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	sum, err := moveDuringCatchUp(t, mctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), Snapshot: path,
		Hooks: mover.Hooks{
			Delta: func(u *stream.Command) bool {
				mu.Lock()
				seen[u.Name()]++
				mu.Unlock()
				return true
			},
		},
	}, workload)
	if opsErr != nil {
		t.Fatalf("workload: %v", opsErr)
	}
	if err != nil || sum.Result != mover.ResultMoved || sum.Snapshot != path {
		t.Fatalf("move: %s by the %s path (%s): %v; want moved by the %s path", sum.Result, sum.Snapshot, sum.SnapshotReason, err, path)
	}
	if swapErr == nil || !strings.Contains(swapErr.Error(), "cluster mode") {
		t.Errorf("SWAPDB on a cluster source: %v; want it refused in cluster mode", swapErr)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	// The functions are there after the move: both libraries on the target.
	for i := 0; functions && i < len(tags); i++ {
		tag := tags[i]
		if err := m.do(ctx, []string{tag + "fc", tag + "fs", tag + "fh"}, func(c redis.Cmdable) error {
			return c.FCall(ctx, "claims_swap", []string{tag + "fc", tag + "fs", tag + "fh"}, "after").Err()
		}); err != nil {
			t.Fatalf("FCALL on the moved keys after the move: %v", err)
		}
	}
	// Each command went through the move's stream, as Redis propagates it.
	mu.Lock()
	names := slices.Sorted(maps.Keys(seen))
	mu.Unlock()
	t.Logf("%d rounds during the catch-up; the stream brought %v", rounds, seen)
	wants := []string{"ZUNIONSTORE", "SINTERSTORE", "BITOP", "PFMERGE", "SORT", "GEOSEARCHSTORE", "GEORADIUS", "RPOPLPUSH", "LMOVE",
		"MSETNX", "RENAMENX", "XGROUP", "XCLAIM", "XACK", "PERSIST", "RPUSH", "SET"}
	if functions {
		wants = append(wants, "INCR", "HINCRBY") // FCALL's writes
	}
	if v.AtLeast(7, 0) {
		wants = append(wants, "PEXPIREAT")
	} else {
		wants = append(wants, "EXPIRE") // 6.2 propagates it relative
	}
	for _, want := range wants {
		if seen[want] == 0 {
			t.Errorf("no %s reached the move's stream during the catch-up (it brought %s)", want, strings.Join(names, " "))
		}
	}
	if rounds < 10 || sum.KeysResynced == 0 {
		t.Fatalf("only %d rounds during the catch-up, %d keys resynced: the multi-key path was hardly exercised", rounds, sum.KeysResynced)
	}
	// Streams are compared apart (see streamView); every other key as a
	// whole.
	var keys, streams []string
	for k := range m.keys {
		if strings.HasSuffix(k, "}st") {
			streams = append(streams, k)
		} else {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	sort.Strings(streams)
	target := nodeClient(t, c, 3)
	present, err := localcluster.CompareKeysMayBeAbsent(ctx, mirror, target, keys)
	if err != nil {
		t.Fatalf("target differs from the mirror: %v", err)
	}
	if present < len(keys)/2 {
		t.Fatalf("the mirror holds only %d of the %d keys the workload wrote: too little was compared", present, len(keys))
	}
	var stale []string
	for _, k := range streams {
		want, err := streamView(ctx, mirror, k)
		if err != nil {
			t.Fatal(err)
		}
		got, err := streamView(ctx, target, k)
		if err != nil {
			t.Fatal(err)
		}
		if got.state != want.state {
			t.Fatalf("stream %s on the target:\n  %s\nthe mirror:\n  %s", k, got.state, want.state)
		}
		if len(got.groups) != len(want.groups) {
			t.Fatalf("stream %s: groups %v on the target, %v on the mirror", k, got.groups, want.groups)
		}
		for g, w := range want.groups {
			r := got.groups[g]
			before, readLate := readBefore[k+" "+g], readDuring[k+" "+g]
			switch {
			case r == w:
			// The limitation: entries-read as before the move, and the lag
			// it implies (entries added less entries read), off by as much.
			case staleEntriesRead && readLate && r.entriesRead == before.entriesRead && r.entriesRead+r.lag == w.entriesRead+w.lag:
				stale = append(stale, fmt.Sprintf("%s %s: entries-read %d lag %d (before the move %d), mirror %d %d", k, g, r.entriesRead, r.lag, before.entriesRead, w.entriesRead, w.lag))
			default:
				t.Errorf("stream %s group %s: entries-read %d lag %d on the target, %d %d on the mirror (before the move %d %d; read during the catch-up: %v)",
					k, g, r.entriesRead, r.lag, w.entriesRead, w.lag, before.entriesRead, before.lag, readLate)
			}
		}
	}
	if staleEntriesRead && len(stale) == 0 {
		t.Errorf("no group read during the catch-up kept its entries-read on %s: the README's limitation is gone, or the workload read no group", v)
	}
	if len(stale) > 0 {
		t.Logf("%s: the README's limitation (XREADGROUP propagates without entries-read): %d groups read during the catch-up kept their entries-read from before the move:\n  %s",
			v, len(stale), strings.Join(stale, "\n  "))
	}
	assertNoOrphans(t, c)
	t.Logf("%d keys resynced, %d delta commands; %d of %d keys exist, the rest deleted on both; %d streams", sum.KeysResynced, sum.DeltaCommands, present, len(keys), len(streams))
}

// streamTally is what the delta test compares of a stream: its entries'
// digest, TTL, every group's consumers, pending entries and last-delivered
// ID, and each consumer's pending count (state); and apart, each group's
// entries-read and lag (groups).
type streamTally struct {
	state  string
	groups map[string]groupRead
}

// groupRead is a group's entries-read and lag (XINFO GROUPS, 7.0+; 0 on
// servers without them).
type groupRead struct{ entriesRead, lag int64 }

func streamView(ctx context.Context, c *redis.Client, key string) (streamTally, error) {
	var v streamTally
	typ, err := c.Type(ctx, key).Result()
	if err != nil || typ != "stream" {
		return v, fmt.Errorf("%s is a %q (%v), not a stream", key, typ, err)
	}
	dig, err := c.Do(ctx, "DEBUG", "DIGEST-VALUE", key).Slice()
	if err != nil {
		return v, err
	}
	ttl, err := c.TTL(ctx, key).Result()
	if err != nil {
		return v, err
	}
	groups, err := c.XInfoGroups(ctx, key).Result()
	if err != nil {
		return v, err
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	var b strings.Builder
	fmt.Fprintf(&b, "digest %v ttl %v;", dig, ttl > 0)
	v.groups = map[string]groupRead{}
	for _, g := range groups {
		fmt.Fprintf(&b, " [%s consumers=%d pending=%d last=%s", g.Name, g.Consumers, g.Pending, g.LastDeliveredID)
		v.groups[g.Name] = groupRead{g.EntriesRead, g.Lag}
		consumers, err := c.XInfoConsumers(ctx, key, g.Name).Result()
		if err != nil {
			return v, err
		}
		sort.Slice(consumers, func(i, j int) bool { return consumers[i].Name < consumers[j].Name })
		for _, cs := range consumers {
			fmt.Fprintf(&b, " %s:%d", cs.Name, cs.Pending)
		}
		pel, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: g.Name, Start: "-", End: "+", Count: 1000}).Result()
		if err != nil {
			return v, err
		}
		for _, p := range pel {
			fmt.Fprintf(&b, " %s@%s", p.ID, p.Consumer)
		}
		b.WriteString("]")
	}
	v.state = b.String()
	return v, nil
}
