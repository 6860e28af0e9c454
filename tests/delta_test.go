package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/internal/localcluster"
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
	for _, path := range []string{mover.SnapshotRDB, mover.SnapshotKeys} {
		t.Run(path, func(t *testing.T) { multiKeyWritesDuringMove(t, path) })
	}
}

func multiKeyWritesDuringMove(t *testing.T, path string) {
	c := fourMasters(t)
	ctx := testContext(t, 3*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-5460")
	bigIn := set
	if path == mover.SnapshotKeys {
		bigIn = mustSlots(t, "5461-10922") // the keys path takes no big key
		if err := c.KeepBacklog(ctx); err != nil {
			t.Fatal(err)
		}
	}
	load(t, cc, 10_000, bigIn)
	mirror := harness.ServerT(t, localcluster.Options{}).Client()
	defer mirror.Close()
	// The workload's client follows redirections and waits out a node that
	// is down for longer than go-redis does by default: a command refused
	// so ran nothing, and an application would try it again. (Valkey 8
	// answers CLUSTERDOWN for the milliseconds between its DELSLOTS release
	// and hearing the target's claim.)
	opts := *cc.Options()
	opts.MaxRedirects, opts.MaxRetries = 16, 64
	opts.MinRetryBackoff, opts.MaxRetryBackoff = time.Millisecond, 50*time.Millisecond
	patient := redis.NewClusterClient(&opts)
	defer patient.Close()
	m := &mirrored{cc: patient, mirror: mirror, keys: map[string]bool{}}
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
					for giveUp := time.Now().Add(time.Second); ; {
						_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Incr(ctx, k("c1"))
							p.IncrBy(ctx, k("c2"), 2)
							return nil
						})
						if err == nil || !strings.HasPrefix(err.Error(), "CLUSTERDOWN") || time.Now().After(giveUp) {
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
	target := c.Nodes[3].Client()
	defer target.Close()
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

// FLUSHALL on the source during the move cancels it, with rollback.
func TestFlushAllCancelsMove(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	load(t, cc, 5000, mustSlots(t, "0-5460"))
	source := c.Nodes[0].Client()
	defer source.Close()
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
	target := c.Nodes[3].Client()
	defer target.Close()
	if n := target.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("target keeps %d keys after the rollback", n)
	}
	if err := c.WaitOwner(ctx, mustSlots(t, "0-5460"), c.IDs[0], 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A multi-key write that reaches the mover during the cutover's write
// pause is resynced at the fence: the read writes nothing, so the pause
// does not hold it up, and the first attempt switches the slots. (A read
// that wrote a marker waited for the pause to end: the fence was missed,
// the source's writes held for the whole 250 ms, and under steady multi-key
// writes half the attempts failed so, now and then all five of a move.)
func TestResyncDuringThePause(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, time.Minute)
	cc := c.Client()
	defer cc.Close()
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
	target := c.Nodes[3].Client()
	defer target.Close()
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
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-5460")
	load(t, cc, 5_000, set)
	source := c.Nodes[0].Client()
	defer source.Close()
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
		target := c.Nodes[1].Client()
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
	default:
		t.Fatalf("move under a hot LMOVE: %s: %s", hot.Result, hot.Error)
	}
}

// moveHeldInCatchUp starts a move of set from the first master to the
// fourth that stays in catch-up (a fence that is never met) until cancel,
// and returns once it is there; done gives its summary at the end. tune
// changes the move's options.
func moveHeldInCatchUp(t *testing.T, c *localcluster.Cluster, set *slots.Set, tune ...func(*mover.Options)) (done <-chan mover.Summary, cancel func()) {
	t.Helper()
	inCatchUp := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out := make(chan mover.Summary, 1)
	opts := mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
		FenceTimeout: time.Nanosecond, MaxAttempts: 1_000_000,
		Progress: func(p mover.Progress) {
			if p.Phase == mover.PhaseCatchUp {
				once.Do(func() { close(inCatchUp) })
			}
		},
	}
	for _, f := range tune {
		f(&opts)
	}
	go func() {
		sum, _ := mover.Run(ctx, opts)
		out <- sum
	}()
	select {
	case <-inCatchUp:
	case <-ctx.Done():
		cancel()
		t.Fatal("the move never reached catch-up")
	}
	return out, cancel
}

// WAIT on the source never counts the move as a replica: not for a write
// to a slot that is not moving (the move holds nothing of it), nor for one
// to a moving slot that the target has applied (a cancel takes it back off
// the target). The source's own replica is stopped, so a WAIT that counts
// one is the move's link.
func TestWaitNeverCountsTheMove(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-999")
	load(t, cc, 2_000, set)
	source := c.Nodes[0].Client()
	defer source.Close()
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
	target := c.Nodes[3].Client()
	defer target.Close()
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

// TTLs set while the stream lags behind keep their expiry time on the
// target. Redis 6.2 propagates SET … PX, SETEX, EXPIRE and PEXPIRE with
// relative times, so a command the target applies late would stretch the
// TTL by the delay; later servers propagate absolute times, and there the
// test shows they stay so.
func TestTTLsSetDuringLagKeepTheirExpiry(t *testing.T) {
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-5460")
	load(t, cc, 2_000, set)
	done, cancel := moveHeldInCatchUp(t, c, set)
	defer cancel()
	// The target stalls for 2 s: every write below reaches it that late.
	stall := c.Nodes[3].Client()
	defer stall.Close()
	go stall.Do(ctx, "DEBUG", "SLEEP", "2")
	time.Sleep(50 * time.Millisecond)
	source := c.Nodes[0].Client()
	defer source.Close()
	tag := tagIn(set, 11)
	want := map[string]int64{} // key → expiry, Unix ms
	for i, op := range []func(k string) error{
		func(k string) error { return source.Set(ctx, k, "v", time.Minute).Err() },
		func(k string) error { return source.SetEx(ctx, k, "v", time.Minute).Err() },
		func(k string) error { return source.Do(ctx, "PSETEX", k, 60_000, "v").Err() },
		func(k string) error {
			if err := source.Set(ctx, k, "v", 0).Err(); err != nil {
				return err
			}
			return source.Expire(ctx, k, time.Minute).Err()
		},
		func(k string) error {
			if err := source.Set(ctx, k, "v", 0).Err(); err != nil {
				return err
			}
			return source.PExpire(ctx, k, time.Minute).Err()
		},
	} {
		k := fmt.Sprint(tag, "ttl", i)
		if err := op(k); err != nil {
			t.Fatal(err)
		}
		pttl, err := source.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		want[k] = time.Now().UnixMilli() + pttl.Milliseconds()
	}
	// Once the target is awake and has applied them: read it there
	// (ASKING: the slots are still importing).
	time.Sleep(2500 * time.Millisecond)
	target := c.Nodes[3].Client()
	defer target.Close()
	conn := target.Conn()
	defer conn.Close()
	for k, at := range want {
		var pttl *redis.DurationCmd
		if _, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			pttl = p.PTTL(ctx, k)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got := time.Now().UnixMilli() + pttl.Val().Milliseconds()
		if d := got - at; d > 300 || d < -300 {
			t.Errorf("%s expires %d ms away from the source's expiry on the target", k, d)
		}
	}
	cancel()
	<-done
}

// The target expires keys by its own clock. A key copied with a short TTL
// that the application extends (or writes) on the source before it runs
// out must not be lost because the target, here stalled, sees the
// extension only after that time: it must end as on the source. A key that
// Keys extended while a long snapshot runs keep their new TTL on the
// target, however far their expiry was when they were copied. The
// source's RDB is slowed (rdb-key-save-delay) to outlast the keys' first
// TTL: the target, a master, expires its copies before the stream's
// extensions reach it, so each must be read again from the source. An
// earlier rule kept only the keys whose expiry was within 10 minutes of
// their copy: with that bound at 1 s, it fails here.
func TestKeysExtendedDuringALongSnapshot(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-999")
	load(t, cc, 6_000, set)
	source := c.Nodes[0].Client()
	defer source.Close()
	ttl := 3 * time.Second
	var keys []string
	for i := range 60 {
		k := fmt.Sprintf("%sextended:%d", tagIn(set, i), i)
		keys = append(keys, k)
		if err := source.Set(ctx, k, i, ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := source.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The fork's child writes the RDB in about 1.5 TTLs.
	delay := (3 * ttl / 2).Microseconds() / n
	if err := source.ConfigSet(ctx, "rdb-key-save-delay", fmt.Sprint(delay)).Err(); err != nil {
		t.Fatal(err)
	}
	defer source.ConfigSet(context.Background(), "rdb-key-save-delay", "0")
	target := c.Nodes[3].Client()
	defer target.Close()
	done := make(chan mover.Summary, 1)
	go func() {
		sum, _ := mover.Run(ctx, mover.Options{
			Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
			Slots: set, Snapshot: mover.SnapshotRDB, Logger: testLogger(t),
		})
		done <- sum
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, _ := target.DBSize(ctx).Result(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the copy never began")
		}
	}
	for _, k := range keys {
		if err := source.PExpire(ctx, k, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want, err := localcluster.Capture(ctx, source, keys)
	if err != nil {
		t.Fatal(err)
	}
	sum := <-done
	if sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %s", sum.Result, sum.Error)
	}
	if time.Duration(sum.SnapshotMS)*time.Millisecond < ttl {
		t.Fatalf("the snapshot took %d ms, less than the keys' first TTL: the test proves nothing", sum.SnapshotMS)
	}
	if err := want.Compare(ctx, target); err != nil {
		t.Fatalf("keys extended during the snapshot, on the target after the move: %v", err)
	}
	t.Logf("snapshot %d ms, %d keys resynced", sum.SnapshotMS, sum.KeysResynced)
}

// simply runs out stays gone.
func TestKeysExtendedBeforeTheyExpireSurviveALateTarget(t *testing.T) {
	c := fourMasters(t)
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-5460")
	// Enough keys for a snapshot that outlasts the first progress report.
	load(t, cc, 200_000, set)
	source := c.Nodes[0].Client()
	defer source.Close()
	tag := tagIn(set, 12)
	short := 2 * time.Second
	keys := map[string]func() error{ // key → what extends or writes it in time
		tag + "str": func() error { return source.PExpire(ctx, tag+"str", time.Minute).Err() },
		tag + "hash": func() error {
			if err := source.HIncrBy(ctx, tag+"hash", "f", 1).Err(); err != nil {
				return err
			}
			return source.PExpire(ctx, tag+"hash", time.Minute).Err()
		},
		tag + "counter": func() error { return source.Set(ctx, tag+"counter", "41", time.Minute).Err() },
		tag + "list":    func() error { return source.Persist(ctx, tag+"list").Err() },
	}
	for _, err := range []error{
		source.Set(ctx, tag+"str", "v", short).Err(),
		source.HSet(ctx, tag+"hash", "f", 1).Err(), source.PExpire(ctx, tag+"hash", short).Err(),
		source.Set(ctx, tag+"counter", "40", short).Err(),
		source.RPush(ctx, tag+"list", "a", "b").Err(), source.PExpire(ctx, tag+"list", short).Err(),
		source.Set(ctx, tag+"expires", "v", short).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	target := c.Nodes[3].Client()
	defer target.Close()
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan mover.Summary, 1)
	go func() {
		sum, _ := mover.Run(mctx, mover.Options{
			Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
			Slots: set, Logger: testLogger(t),
		})
		done <- sum
	}()
	// Once the copy has begun, the target stalls past the keys' expiry,
	// and the source extends them before it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Microsecond) {
		if n, _ := target.DBSize(ctx).Result(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the copy never began")
		}
	}
	stall := c.Nodes[3].Client()
	defer stall.Close()
	go stall.Do(ctx, "DEBUG", "SLEEP", "3")
	time.Sleep(20 * time.Millisecond)
	for k, extend := range keys {
		if err := extend(); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	want, err := localcluster.Capture(ctx, source, slices.Collect(maps.Keys(keys)))
	if err != nil {
		t.Fatal(err)
	}
	sum := <-done
	if sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %s", sum.Result, sum.Error)
	}
	if err := want.Compare(ctx, target); err != nil {
		t.Fatalf("keys extended in time, on the target after the move: %v", err)
	}
	if n, err := target.Exists(ctx, tag+"expires").Result(); err != nil || n != 0 {
		t.Fatalf("a key that ran out is back on the target (%d, %v)", n, err)
	}
	t.Logf("%d keys resynced", sum.KeysResynced)
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
	cc := c.Client()
	defer cc.Close()
	source, target := c.Nodes[0].Client(), c.Nodes[3].Client()
	defer source.Close()
	defer target.Close()
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

// The README's first command: the demo starts a cluster, NATS and a
// sidecar per master, and applies a plan adding the empty master through
// the sidecars while a workload writes. Its summary must say every move
// moved, the masters ended even, no write was lost, the workload saw no
// ASK or TRYAGAIN, and the sample keys of every type are unchanged.
func TestDemo(t *testing.T) {
	code, stdout, stderr := runCLI(t, "demo", "--keys", "20000", "--big-elements", "3000", "--json")
	var sum struct {
		Moves []struct {
			Result string `json:"result"`
			Keys   int64  `json:"keys"`
			Task   string `json:"task"`
		} `json:"moves"`
		Moved       int              `json:"moved"`
		Writes      int              `json:"writes"`
		Lost        int              `json:"lost"`
		Redirects   map[string]int64 `json:"redirects"`
		KeysChecked int              `json:"keys_checked"`
		KeysEqual   bool             `json:"keys_equal"`
		Imbalance   [2]float64       `json:"imbalance"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); code != 0 || err != nil {
		t.Fatalf("demo: exit %d (%v)\nstdout %s\nstderr %s", code, err, stdout, stderr)
	}
	t.Logf("demo:\n%s", stderr)
	if len(sum.Moves) < 3 || sum.Moved != len(sum.Moves) {
		t.Fatalf("demo: %d of %d moves moved, want 3 or more, all", sum.Moved, len(sum.Moves))
	}
	for _, m := range sum.Moves {
		if m.Task == "" || m.Keys == 0 {
			t.Fatalf("demo: a move not run by a sidecar, or with no keys: %+v", m)
		}
	}
	if sum.Writes == 0 || sum.Lost != 0 || sum.Redirects["ASK"] != 0 || sum.Redirects["TRYAGAIN"] != 0 {
		t.Fatalf("demo: %d writes, %d lost, redirects %v; want some writes, none lost, no ASK or TRYAGAIN", sum.Writes, sum.Lost, sum.Redirects)
	}
	if !sum.KeysEqual || sum.KeysChecked < 100 || sum.Imbalance[0] < 1.3 || sum.Imbalance[1] > 1.05 {
		t.Fatalf("demo: %d sample keys equal: %v; imbalance %v, want from 1.33 to 1.0", sum.KeysChecked, sum.KeysEqual, sum.Imbalance)
	}
}
