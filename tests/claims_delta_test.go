package tests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/tests/harness"
)

// The function libraries of the delta test: one loaded everywhere before
// the move, one during it (on every master, as an operator loads functions
// in a cluster, and on the mirror).
const (
	claimsLibBefore = "#!lua name=claimsbefore\n" +
		"redis.register_function('claims_bump', function(keys, args) redis.call('INCR', keys[1]); redis.call('RPUSH', keys[2], args[1]); return 1 end)"
	claimsLibDuring = "#!lua name=claimsduring\n" +
		"redis.register_function('claims_swap', function(keys, args) local v = redis.call('GET', keys[1]); redis.call('SET', keys[2], v or args[1]); redis.call('HINCRBY', keys[3], 'n', 1); return 1 end)"
)

// Issue 10, untested claim 4: multi-key and group commands beyond the nine
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
func TestClaimsMoreMultiKeyDeltaCommands(t *testing.T) {
	for _, path := range []string{mover.SnapshotRDB, mover.SnapshotKeys} {
		t.Run(path, func(t *testing.T) { moreMultiKeyDeltaCommands(t, path) })
	}
}

func moreMultiKeyDeltaCommands(t *testing.T, path string) {
	c := fourMasters(t)
	ctx := testContext(t, 3*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-2000")
	bigIn := set
	if path == mover.SnapshotKeys {
		// The keys path takes no big list or stream, and needs a backlog.
		bigIn = mustSlots(t, "5461-10922")
		if err := c.KeepBacklog(ctx); err != nil {
			t.Fatal(err)
		}
	}
	load(t, cc, 2_000, bigIn)
	v, err := localcluster.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	functions := v.AtLeast(7, 0)
	// The entries-read limitation's servers (see above).
	staleEntriesRead := v.Product == "Redis" && v.AtLeast(7, 0) && !v.AtLeast(7, 4) ||
		v.Product == "Valkey" && !v.AtLeast(8, 0)
	mirror := harness.ServerT(t, localcluster.Options{}).Client()
	defer mirror.Close()
	opts := *cc.Options()
	opts.MaxRedirects, opts.MaxRetries = 16, 64
	opts.MinRetryBackoff, opts.MaxRetryBackoff = time.Millisecond, 50*time.Millisecond
	patient := redis.NewClusterClient(&opts)
	defer patient.Close()
	m := &mirrored{cc: patient, mirror: mirror, keys: map[string]bool{}}
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
	var inCatchUp atomic.Bool
	opsDone := make(chan struct{})
	var opsErr atomic.Value
	var rounds atomic.Int64
	var swapErr error
	workload := func() {
		defer close(opsDone)
		source := c.Nodes[0].Client()
		defer source.Close()
		swapErr = source.Do(ctx, "SWAPDB", 0, 1).Err()
		if err := loadEverywhere(claimsLibDuring); err != nil {
			opsErr.Store(fmt.Errorf("FUNCTION LOAD during the move: %w", err))
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for i := len(tags); i < 40*len(tags) && time.Now().Before(deadline); i++ {
			if err := round(i, true); err != nil {
				opsErr.Store(err)
				return
			}
			rounds.Add(1)
		}
	}
	mctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	sum, err := mover.Run(mctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t), MaxAttempts: 1_000_000, FenceTimeout: 5 * time.Millisecond, Snapshot: path,
		Progress: func(p mover.Progress) {
			if p.Phase == mover.PhaseCatchUp && inCatchUp.CompareAndSwap(false, true) {
				go workload()
			}
		},
		Hooks: mover.Hooks{
			Fence: holdFenceUntil(opsDone),
			Delta: func(u *stream.Command) bool {
				mu.Lock()
				seen[u.Name()]++
				mu.Unlock()
				return true
			},
		},
	})
	if !inCatchUp.Load() {
		t.Fatalf("the move never reached catch-up: %s (%v)", sum.Result, err)
	}
	<-opsDone
	if e := opsErr.Load(); e != nil {
		t.Fatalf("workload: %v", e)
	}
	if err != nil || sum.Result != mover.ResultMoved || sum.Snapshot != path {
		t.Fatalf("move: %s by the %s path (%s): %v; want moved by the %s path", sum.Result, sum.Snapshot, sum.SnapshotReason, err, path)
	}
	if swapErr == nil || !strings.Contains(swapErr.Error(), "cluster mode") {
		t.Errorf("SWAPDB on a cluster source: %v; want it refused in cluster mode", swapErr)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
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
	t.Logf("%d rounds during the catch-up; the stream brought %v", rounds.Load(), seen)
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
	if rounds.Load() < 10 || sum.KeysResynced == 0 {
		t.Fatalf("only %d rounds during the catch-up, %d keys resynced: the multi-key path was hardly exercised", rounds.Load(), sum.KeysResynced)
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
	target := c.Nodes[3].Client()
	defer target.Close()
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

// Issue 10, claim 4's FLUSHDB: the README says FLUSHDB on the source
// cancels the move (rolled back), like FLUSHALL. The move is held in
// catch-up; FLUSHDB on the source must end it rolled back with
// ErrSourceFlushed, the target holding no key of the slots and no mark,
// the source still their owner (flushed, as asked), within a bound (a
// missed FLUSHDB would hold the move until its deadline).
func TestClaimsFlushDBCancelsMove(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-5460")
	load(t, cc, 2_000, set)
	source := c.Nodes[0].Client()
	defer source.Close()
	target := c.Nodes[3].Client()
	defer target.Close()
	done, cancel := moveHeldInCatchUp(t, c, set)
	defer cancel()
	if err := source.FlushDB(ctx).Err(); err != nil {
		cancel()
		<-done
		t.Fatalf("FLUSHDB on the source: %v", err)
	}
	var sum mover.Summary
	select {
	case sum = <-done:
	case <-time.After(20 * time.Second):
		cancel()
		sum = <-done
		t.Fatalf("the move did not notice FLUSHDB within 20s; cancelled: %s (%s)", sum.Result, sum.Error)
	}
	if sum.Result != mover.ResultRolledBack || !strings.Contains(sum.Error, mover.ErrSourceFlushed.Error()) {
		t.Fatalf("move: %s (%s); want rolled back with %q", sum.Result, sum.Error, mover.ErrSourceFlushed)
	}
	if sum.KeysCopied == 0 {
		t.Fatal("the move copied nothing before the FLUSHDB: the rollback removed nothing")
	}
	counts, err := cluster.CountKeys(ctx, target, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range counts {
		if n != 0 {
			t.Fatalf("the rolled-back target keeps %d keys of slot %d", n, set.Slots()[i])
		}
	}
	if err := c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := source.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the source holds %d keys after its FLUSHDB (%v)", n, err)
	}
	assertNoOrphans(t, c)
	t.Logf("move: %s: %s", sum.Result, sum.Error)
}
