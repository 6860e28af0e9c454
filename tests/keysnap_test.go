package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
)

// The keys path (no fork, no RDB: the link continues the source's history
// and only the chosen slots' keys are read) moves every key of every type
// exactly, under a writer that loses nothing, and auto takes it for a
// small share of the source and the RDB for many small keys, saying why. The source
// never had a replica, so it keeps no backlog: the first move starts one,
// without a fork.
func TestKeysSnapshot(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	keys := load(t, cc, 30_000, mustSlots(t, "5461-10922"))
	w := startWriter(t, c, 1_000_000)

	source := nodeClient(t, c, 0)
	forks := func() int64 {
		n, err := info.ReadInt(ctx, source, "stats", "total_forks")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	keysPath := func(o *mover.Options) { o.Snapshot = mover.SnapshotKeys }
	forksBefore := forks()
	sum := moveAndCheck(t, c, 0, 3, mustSlots(t, "0-54"), keys)
	if sum.Snapshot != mover.SnapshotKeys || sum.RDBBytes != 0 || !strings.Contains(sum.SnapshotReason, "started one without a fork") {
		t.Fatalf("auto on 1%% of a source without a backlog took %q (%s), %d RDB bytes", sum.Snapshot, sum.SnapshotReason, sum.RDBBytes)
	}
	if n := forks(); n != forksBefore {
		t.Fatalf("the source forked %d times during a keys-path move", n-forksBefore)
	}

	sum = moveAndCheck(t, c, 0, 3, mustSlots(t, "55-109"), keys, keysPath)
	if sum.Snapshot != mover.SnapshotKeys || !strings.Contains(sum.SnapshotReason, "asked for") || strings.Contains(sum.SnapshotReason, "started one") {
		t.Fatalf("asked for the keys path with a backlog, took %q: %s", sum.Snapshot, sum.SnapshotReason)
	}
	if n := forks(); n != forksBefore {
		t.Fatalf("the source forked %d times during keys-path moves", n-forksBefore)
	}
	// The rest of the shard, with 40k small keys more: many keys in little
	// memory, which the RDB path copies far cheaper than key by key.
	rest := mustSlots(t, "110-5400")
	keys = append(keys, loadSmall(t, cc, 40_000, rest)...)
	sum = moveAndCheck(t, c, 0, 3, rest, keys)
	if sum.Snapshot != mover.SnapshotRDB || !strings.Contains(sum.SnapshotReason, "predicted keys") || sum.Prediction == nil || sum.Prediction.RDBMS >= sum.Prediction.KeysMS {
		t.Fatalf("auto on the rest of the shard took %q: %s", sum.Snapshot, sum.SnapshotReason)
	}

	if ops := w.finish(t); ops < 100 {
		t.Fatalf("the writer managed only %d writes", ops)
	}

	// Master 1 holds the big keys.
	bigSlot := slots.ForString(tagIn(mustSlots(t, "5461-10922"), 0))
	one := mustSlots(t, fmt.Sprint(bigSlot))
	// The cluster's state once gossip has settled, less the views' lines
	// of nodes with no slots and no marks: the replicas, which a view
	// learns of for seconds after one is added.
	settled := func() string {
		t.Helper()
		last := ""
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			full := fingerprint(t, ctx, c)
			fp := strings.Join(slices.DeleteFunc(strings.Split(full, "\n"), func(l string) bool { return strings.HasSuffix(l, " slots= migrating=map[] importing=map[]") }), "\n")
			if fp == last {
				return fp
			}
			last = fp
		}
		t.Fatalf("the cluster's state does not settle:\n%s", last)
		return ""
	}
	refused := func(why string) {
		t.Helper()
		before := settled()
		_, err := mover.Run(ctx, mover.Options{Source: mover.Conn{Addr: c.Nodes[1].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
			Slots: one, Logger: testLogger(t), Snapshot: mover.SnapshotKeys})
		var input *mover.InputError
		if !errors.As(err, &input) || !strings.Contains(err.Error(), why) {
			t.Fatalf("--snapshot keys: %v, want a refusal saying %q", err, why)
		}
		if after := settled(); after != before {
			t.Fatalf("a refused move changed the cluster:\n%s\n%s", before, after)
		}
	}
	refused("too big to read in one short call")
	sum = moveAndCheck(t, c, 1, 3, one, keys)
	if sum.Snapshot != mover.SnapshotRDB || !strings.Contains(sum.SnapshotReason, "too big") {
		t.Fatalf("auto with a big key took %q: %s", sum.Snapshot, sum.SnapshotReason)
	}
}

// On the keys path, big hashes, sets and sorted sets are read in chunks
// while a client changes their elements, the hash's TTL, and pops the sorted
// set (which starts its read over): the target ends exactly like a mirror
// that saw the same writes.
func TestKeysPathReadsBigKeysInChunks(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c, m := mirroredCluster(t, ctx)
	set := mustSlots(t, "0-99")
	tag := tagIn(set, 0)
	hash, sset, zset, small := tag+"hash", tag+"set", tag+"zset", tag+"small"
	const elements, zElements = 60_000, 60_000
	for i := 0; i < elements; i += 1000 {
		err := m.do(ctx, []string{hash, sset, zset}, func(c redis.Cmdable) error {
			p := c.Pipeline()
			for j := i; j < i+1000; j++ {
				p.HSet(ctx, hash, fmt.Sprint("f", j), j)
				p.SAdd(ctx, sset, j)
				if j < zElements {
					p.ZAdd(ctx, zset, redis.Z{Score: float64(j), Member: fmt.Sprint("m", j)})
				}
			}
			_, err := p.Exec(ctx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The set's TTL is one no write below changes: only its last chunk's
	// read brings it (the hash's is set again by the writes after it).
	if err := m.do(ctx, []string{hash, small}, func(c redis.Cmdable) error {
		if err := c.Set(ctx, small, "x", time.Hour).Err(); err != nil {
			return err
		}
		if err := c.Expire(ctx, sset, 2*time.Hour).Err(); err != nil {
			return err
		}
		return c.Expire(ctx, hash, time.Hour).Err()
	}); err != nil {
		t.Fatal(err)
	}
	// With hash-field expiration (7.4+), a field no write touches expires:
	// its chunk brings the expiry (a hash's digest says whether a field has one).
	if info, err := m.cc.Do(ctx, "COMMAND", "INFO", "HPEXPIRE").Slice(); err == nil && len(info) == 1 && info[0] != nil {
		if err := m.do(ctx, nil, func(c redis.Cmdable) error {
			if err := c.HSet(ctx, hash, "ttl-field", "x").Err(); err != nil {
				return err
			}
			return c.HPExpire(ctx, hash, 2*time.Hour, "ttl-field").Err()
		}); err != nil {
			t.Fatal(err)
		}
	}

	writes := writeMirrored(ctx, m, nil, 200_000, func(c redis.Cmdable, i int) error {
		j := (i * 7919) % (elements + 5000) // some new elements too
		switch i % 8 {
		case 0:
			return c.HSet(ctx, hash, fmt.Sprint("f", j), fmt.Sprint("v", i)).Err()
		case 1:
			return c.HDel(ctx, hash, fmt.Sprint("f", j)).Err()
		case 2:
			return c.HIncrBy(ctx, hash, fmt.Sprint("n", j%100), 1).Err()
		case 3:
			return c.SAdd(ctx, sset, fmt.Sprint("s", i)).Err()
		case 4:
			return c.SRem(ctx, sset, j).Err()
		case 5:
			return c.ZIncrBy(ctx, zset, 1, fmt.Sprint("m", j%zElements)).Err()
		case 6:
			return c.ZRem(ctx, zset, fmt.Sprint("m", j%zElements)).Err()
		default:
			return c.Expire(ctx, hash, time.Duration(3600+i%100)*time.Second).Err()
		}
	})
	// One ZPOPMIN (by position: the read starts over) once the sorted
	// set's read is under way: the feeder waits for it, and at most a few
	// of the set's 20 or more chunks are read ahead.
	target := nodeClient(t, c, 3)
	var popped error = errors.New("the sorted set's read never started")
	var popOnce sync.Once
	popDuringRead := func(key string) {
		if key == zset {
			popOnce.Do(func() {
				popped = m.do(ctx, nil, func(c redis.Cmdable) error { return c.ZPopMin(ctx, zset, 50).Err() })
			})
		}
	}
	time.Sleep(100 * time.Millisecond)
	sum, err := mover.Run(ctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), Snapshot: mover.SnapshotKeys, BigKeyElements: 5000,
		// Applying the stream slowly spaces the chunk reads (each waits
		// for a marker), so that many writes fall between them.
		Hooks: mover.Hooks{Delta: func(*stream.Command) bool { time.Sleep(100 * time.Microsecond); return true },
			BigKeyStarted: popDuringRead},
	})
	ops := writes(t)
	if popped != nil {
		t.Fatalf("ZPOPMIN during the sorted set's read: %v", popped)
	}
	if err != nil || sum.Result != mover.ResultMoved || sum.Snapshot != mover.SnapshotKeys {
		t.Fatalf("move: %s on the %s path: %v", sum.Result, sum.Snapshot, err)
	}
	keys := []string{hash, sset, zset, small}
	if err := localcluster.CompareKeys(ctx, m.mirror, target, keys); err != nil {
		t.Fatalf("target differs from the mirror after %d writes: %v", ops, err)
	}
	if sum.BigKeys != 3 || sum.DeltaCommands < 100 || sum.KeysResynced != 1 {
		t.Fatalf("%d big keys read in chunks (want 3), %d delta commands applied (want many), %d reads started over (want 1, the ZPOPMIN): the test missed its windows",
			sum.BigKeys, sum.DeltaCommands, sum.KeysResynced)
	}
	t.Logf("%d writes during the move; %d delta commands; %d big-key reads started over (ZPOPMIN); %d ms", ops, sum.DeltaCommands, sum.KeysResynced, sum.TotalMS)
}

// loadSmall writes n keys of one byte in set, none with a TTL, and
// returns their names.
func loadSmall(t *testing.T, cc *redis.ClusterClient, n int, set *slots.Set) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	p := cc.Pipeline()
	for i := 0; len(names) < n; i++ {
		k := fmt.Sprint("small:", i)
		if !set.Contains(slots.ForString(k)) {
			continue
		}
		names = append(names, k)
		p.Set(ctx, k, "v", 0)
		if p.Len() == 1000 {
			if _, err := p.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return names
}

// A big sorted set is read in its order, by rank; one that a client keeps
// changing before the last member read is read again in the scan's order,
// which such changes do not disturb, and a quiet one is read once: the
// target ends exactly like a mirror that saw the same writes. The changes:
// members removed and added there (the next chunk's ranks move), or one
// removed and another moved there by ZINCRBY in one transaction (the ranks
// stay; the target lacks the moved member's old score).
func TestKeysPathReadsSortedSetsInOrder(t *testing.T) {
	const members = 40_000
	low := func(i int) string { return fmt.Sprintf("m%05d", i) }
	high := func(i int) string { return fmt.Sprintf("m%05d", members-1-i) }
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context, c redis.Cmdable, key string, i int) error
	}{
		{"ranks moved", func(ctx context.Context, c redis.Cmdable, key string, i int) error {
			if i%2 == 0 {
				return c.ZRem(ctx, key, low(i)).Err()
			}
			return c.ZAdd(ctx, key, redis.Z{Score: float64(-1 - i), Member: fmt.Sprint("early", i)}).Err()
		}},
		{"a member moved by its old score", func(ctx context.Context, c redis.Cmdable, key string, i int) error {
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ZRem(ctx, key, low(i))
				p.ZIncrBy(ctx, key, -1e6, high(i))
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { sortedSetsInOrder(t, members, tc.write) })
	}
}

func sortedSetsInOrder(t *testing.T, members int, write func(ctx context.Context, c redis.Cmdable, key string, i int) error) {
	ctx := testContext(t, 3*time.Minute)
	c, m := mirroredCluster(t, ctx)
	set := mustSlots(t, "0-99")
	tag := tagIn(set, 0)
	busy, quiet := tag+"busy", tag+"quiet"
	for i := 0; i < members; i += 1000 {
		err := m.do(ctx, []string{busy, quiet}, func(c redis.Cmdable) error {
			p := c.Pipeline()
			for j := i; j < i+1000; j++ {
				p.ZAdd(ctx, busy, redis.Z{Score: float64(j), Member: fmt.Sprintf("m%05d", j)})
				p.ZAdd(ctx, quiet, redis.Z{Score: float64(j % 100), Member: fmt.Sprintf("q%05d", j)}) // ties: ordered by member
			}
			_, err := p.Exec(ctx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// The writes start with the busy set's read, and change it at its low
	// end, before any member read after the first chunk.
	var starts sync.Map // key → reads started
	writing := make(chan struct{})
	var once sync.Once
	started := func(key string) {
		n, _ := starts.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if key == busy {
			once.Do(func() { close(writing) })
		}
	}
	writes := writeMirrored(ctx, m, writing, 3000, func(c redis.Cmdable, i int) error { return write(ctx, c, busy, i) })
	sum, err := mover.Run(ctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), Snapshot: mover.SnapshotKeys, BigKeyElements: 5000,
		// Small chunks (about 800 members), and the stream applied slowly,
		// space the reads of the busy set among its writes.
		ChunkTime: 200 * time.Microsecond,
		Hooks: mover.Hooks{Delta: func(*stream.Command) bool { time.Sleep(100 * time.Microsecond); return true },
			BigKeyStarted: started},
	})
	ops := writes(t)
	if err != nil || sum.Result != mover.ResultMoved || sum.Snapshot != mover.SnapshotKeys {
		t.Fatalf("move: %s on the %s path: %v", sum.Result, sum.Snapshot, err)
	}
	target := nodeClient(t, c, 3)
	if err := localcluster.CompareKeys(ctx, m.mirror, target, []string{busy, quiet}); err != nil {
		t.Fatalf("target differs from the mirror after %d writes: %v", ops, err)
	}
	reads := func(key string) int64 {
		n, _ := starts.Load(key)
		if n == nil {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}
	if reads(quiet) != 1 || reads(busy) < 2 || sum.BigKeys != 2 {
		t.Fatalf("reads started: quiet %d (want 1), busy %d (want 2 or more: the writes start it over); %d big keys (want 2)",
			reads(quiet), reads(busy), sum.BigKeys)
	}
	t.Logf("%d writes during the move; busy set read %d times; %d ms", ops, reads(busy), sum.TotalMS)
}

// mirroredCluster starts four masters whose first keeps a backlog, and a
// mirror server that is to see the same writes.
func mirroredCluster(t *testing.T, ctx context.Context) (*localcluster.Cluster, *mirrored) {
	c := fourMasters(t)
	if err := c.KeepBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	return c, newMirrored(t, clusterClient(t, c))
}

// writeMirrored runs op(i) on the cluster and the mirror, i from 0 to n,
// about 4 a millisecond, from when start closes (at once if nil) for a
// minute at most. The function it returns stops the writes 100 ms later
// and returns how many were made, failing t on a failed one.
func writeMirrored(ctx context.Context, m *mirrored, start <-chan struct{}, n int, op func(c redis.Cmdable, i int) error) func(t *testing.T) int64 {
	opsCtx, stop := context.WithTimeout(ctx, time.Minute)
	done := make(chan error, 1)
	var ops atomic.Int64
	go func() {
		if start != nil {
			select {
			case <-start:
			case <-opsCtx.Done():
			}
		}
		var err error
		for i := 0; i < n && opsCtx.Err() == nil && err == nil; i++ {
			if i%4 == 0 {
				time.Sleep(time.Millisecond) // a steady rate through the whole move
			}
			err = m.do(ctx, nil, func(c redis.Cmdable) error { return op(c, i) })
			ops.Add(1)
		}
		done <- err
	}()
	return func(t *testing.T) int64 {
		t.Helper()
		time.Sleep(100 * time.Millisecond)
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("workload: %v", err)
		}
		return ops.Load()
	}
}
