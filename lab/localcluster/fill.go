package localcluster

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// FillOptions say what FillEveryType writes.
type FillOptions struct {
	// Small is the number of keys of each small variant (default 4).
	Small int
	// BigElements is the element count of the few big keys (one list, set,
	// hash, zset and stream); 0 writes no big keys.
	BigElements int
	// BigTypes are the types of the big keys, of BigTypeNames; nil for all.
	BigTypes []string
	// TTL is given to every other key (and to one big key); 0 means no TTLs.
	TTL time.Duration
	// Seed makes the random content reproducible.
	Seed uint64
}

// FillEveryType writes keys of every type and encoding Redis 7.x saves in
// an RDB, all named prefix + ":" + …, and returns their names. Strings:
// short, integer-encodable, binary, long compressible, long random, empty.
// Lists: small (one listpack node) and medium (several). Sets: intset and
// hashtable. Hashes and zsets: listpack and hashtable/skiplist, zsets with
// ±inf, fractional and extreme scores. Streams: differing and repeated
// field names, deleted entries, consumer groups with consumers, pending
// entries (some claimed, some acknowledged), plus an empty stream with a
// group. c may be a *redis.ClusterClient: every command names one key.
func FillEveryType(ctx context.Context, c redis.Cmdable, prefix string, opts FillOptions) ([]string, error) {
	if opts.Small <= 0 {
		opts.Small = 4
	}
	f := &filler{ctx: ctx, c: c, pipe: c.Pipeline(), rnd: rand.New(rand.NewPCG(opts.Seed, 0x5107)), ttl: opts.TTL}
	ints := []string{"0", "-1", "127", "-128", "32767", "-32768", "2147483647", "-2147483648",
		"2147483648", "9223372036854775807", "-9223372036854775808", "007", "12345678901"}
	for i := 0; i < opts.Small; i++ {
		k := func(kind string) string { return fmt.Sprintf("%s:%s:%d", prefix, kind, i) }
		withTTL := i%2 == 0
		f.add(k("str:raw"), withTTL, f.pipe.Set(ctx, k("str:raw"), "value-"+strconv.Itoa(i), 0))
		f.add(k("str:int"), withTTL, f.pipe.Set(ctx, k("str:int"), ints[i%len(ints)], 0))
		f.add(k("str:bin"), withTTL, f.pipe.Set(ctx, k("str:bin"), f.binary(64), 0))
		f.add(k("str:long"), withTTL, f.pipe.Set(ctx, k("str:long"), strings.Repeat("compressible-"+strconv.Itoa(i)+"-", 800), 0))
		f.add(k("str:rand"), withTTL, f.pipe.Set(ctx, k("str:rand"), f.binary(1500), 0))
		if i == 0 {
			f.add(k("str:empty"), false, f.pipe.Set(ctx, k("str:empty"), "", 0))
		}

		f.add(k("list:small"), withTTL, f.pipe.RPush(ctx, k("list:small"), "a", 1, "-5", f.binary(20), "1000000", "3.14"))
		items := make([]any, 600)
		for j := range items {
			items[j] = fmt.Sprintf("item-%05d-%s", j, strings.Repeat("x", j%50))
		}
		f.add(k("list:medium"), withTTL, f.pipe.RPush(ctx, k("list:medium"), items...))

		f.add(k("set:int"), withTTL, f.pipe.SAdd(ctx, k("set:int"), 1, 2, 3, -40000, 70000, int64(5000000000), int64(-5000000000), 0))
		f.add(k("set:str"), withTTL, f.pipe.SAdd(ctx, k("set:str"), "alpha", "beta", f.binary(30), "12", "gamma"))

		f.add(k("hash:small"), withTTL, f.pipe.HSet(ctx, k("hash:small"), "name", "n"+strconv.Itoa(i), "count", 42, "neg", -7, "bin", f.binary(10)))
		f.add(k("hash:wide"), withTTL, f.pipe.HSet(ctx, k("hash:wide"), "a", "1", "long", strings.Repeat("v", 100), "rnd", f.binary(80)))

		f.add(k("zset:small"), withTTL, f.pipe.ZAdd(ctx, k("zset:small"),
			redis.Z{Score: 1, Member: "one"}, redis.Z{Score: -2.5, Member: "neg"},
			redis.Z{Score: math.Inf(1), Member: "pinf"}, redis.Z{Score: math.Inf(-1), Member: "ninf"},
			redis.Z{Score: 0.1, Member: "tenth"}, redis.Z{Score: 1e300, Member: "huge"},
			redis.Z{Score: 5e-324, Member: "tiny"}, redis.Z{Score: 123456789, Member: 77}))
		zs := make([]redis.Z, 200)
		for j := range zs {
			zs[j] = redis.Z{Score: f.rnd.NormFloat64() * 1e6, Member: fmt.Sprintf("m%04d", j)}
		}
		f.add(k("zset:skiplist"), withTTL, f.pipe.ZAdd(ctx, k("zset:skiplist"), zs...))

		if err := f.stream(k("stream"), withTTL, 30); err != nil {
			return nil, err
		}
		if i == 0 {
			key := k("stream:empty")
			f.add(key, false, f.pipe.XGroupCreateMkStream(ctx, key, "g", "$"))
		}
		if err := f.flush(false); err != nil {
			return nil, err
		}
	}
	if n := opts.BigElements; n > 0 {
		types := opts.BigTypes
		if types == nil {
			types = BigTypeNames
		}
		if err := f.big(prefix, n, types); err != nil {
			return nil, err
		}
	}
	if err := f.flush(true); err != nil {
		return nil, err
	}
	return f.keys, nil
}

type filler struct {
	ctx     context.Context
	c       redis.Cmdable
	pipe    redis.Pipeliner
	rnd     *rand.Rand
	ttl     time.Duration
	keys    []string
	pending []string // keys to give a TTL at the next flush
}

// add records a key written by the queued command (checked by Exec).
func (f *filler) add(key string, withTTL bool, _ redis.Cmder) {
	f.keys = append(f.keys, key)
	if withTTL && f.ttl > 0 {
		f.pending = append(f.pending, key)
	}
}

func (f *filler) binary(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(f.rnd.Uint32())
	}
	b[0], b[n-1] = 0, 0xff
	return string(b)
}

// flush sends the queued commands once enough are queued (or always).
func (f *filler) flush(always bool) error {
	if !always && f.pipe.Len() < 2000 {
		return nil
	}
	for _, k := range f.pending {
		f.pipe.PExpire(f.ctx, k, f.ttl)
	}
	f.pending = f.pending[:0]
	_, err := f.pipe.Exec(f.ctx)
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	return nil
}

// stream writes a stream of n entries with two groups, pending entries,
// an acknowledged and a claimed entry, and deleted entries. It flushes,
// because reads by a group must follow the writes.
func (f *filler) stream(key string, withTTL bool, n int) error {
	ctx, p := f.ctx, f.pipe
	for j := 0; j < n; j++ {
		var values []any
		switch j % 4 {
		case 0, 1: // the master entry's fields: stored once per node
			values = []any{"temp", j, "unit", "C"}
		case 2:
			values = []any{"other", f.binary(12), "n", -j}
		default: // a repeated field name, which a map would lose
			values = []any{"dup", "first", "dup", "second", "x", strconv.Itoa(j)}
		}
		p.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "*", Values: values})
	}
	p.XGroupCreate(ctx, key, "g1", "0")
	p.XGroupCreate(ctx, key, "g2", "0")
	p.XGroupCreateConsumer(ctx, key, "g2", "idle-consumer")
	f.add(key, withTTL, nil)
	if err := f.flush(true); err != nil {
		return err
	}
	read := func(group, consumer string, count int64) ([]string, error) {
		res, err := f.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{key, ">"}, Count: count}).Result()
		if err != nil {
			return nil, fmt.Errorf("fill: xreadgroup %s: %w", key, err)
		}
		var ids []string
		for _, s := range res {
			for _, m := range s.Messages {
				ids = append(ids, m.ID)
			}
		}
		return ids, nil
	}
	a, err := read("g1", "alice", 6)
	if err != nil {
		return err
	}
	b, err := read("g1", "bob", 4)
	if err != nil {
		return err
	}
	if _, err := read("g2", "carol", 3); err != nil {
		return err
	}
	if len(a) < 6 || len(b) < 4 {
		return fmt.Errorf("fill: %s: short group reads", key)
	}
	p.XAck(ctx, key, "g1", a[0])
	p.XClaim(ctx, &redis.XClaimArgs{Stream: key, Group: "g1", Consumer: "bob", MinIdle: 0, Messages: []string{a[1]}})
	// Deleted entries that no group has pending: one in the middle, the last.
	all, err := f.c.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		return fmt.Errorf("fill: xrange %s: %w", key, err)
	}
	p.XDel(ctx, key, all[len(all)-5].ID, all[len(all)-1].ID)
	return f.flush(true)
}

// BigTypeNames are the types FillOptions.BigTypes may name.
var BigTypeNames = []string{"list", "set", "hash", "zset", "stream"}

// big writes one big key of each of types, in chunks.
func (f *filler) big(prefix string, n int, types []string) error {
	ctx, p := f.ctx, f.pipe
	const chunk = 1000
	key := func(kind string) string { return prefix + ":big:" + kind }
	has := func(kind string) bool { return slices.Contains(types, kind) }
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		var list, set, hash []any
		var zs []redis.Z
		for j := start; j < end; j++ {
			list = append(list, "item-"+strconv.Itoa(j))
			set = append(set, "member-"+strconv.Itoa(j))
			hash = append(hash, "field-"+strconv.Itoa(j), j)
			zs = append(zs, redis.Z{Score: float64(j) / 7, Member: "z" + strconv.Itoa(j)})
		}
		if has("list") {
			p.RPush(ctx, key("list"), list...)
		}
		if has("set") {
			p.SAdd(ctx, key("set"), set...)
		}
		if has("hash") {
			p.HSet(ctx, key("hash"), hash...)
		}
		if has("zset") {
			p.ZAdd(ctx, key("zset"), zs...)
		}
		if has("stream") {
			for j := start; j < end; j++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: key("stream"), ID: fmt.Sprintf("%d-%d", 1+j/3, j%3), Values: []any{"n", j, "s", "v" + strconv.Itoa(j)}})
			}
		}
		if err := f.flush(false); err != nil {
			return err
		}
	}
	for _, k := range []string{"list", "set", "hash", "zset"} {
		if has(k) {
			f.add(key(k), false, nil)
		}
	}
	if !has("stream") {
		return f.flush(true)
	}
	p.XGroupCreate(ctx, key("stream"), "g", "0")
	f.add(key("stream"), true, nil)
	if err := f.flush(true); err != nil {
		return err
	}
	// Many pending entries, in two consumers.
	for _, consumer := range []string{"c1", "c2"} {
		if err := f.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: consumer, Streams: []string{key("stream"), ">"}, Count: int64(min(n/4, 5000))}).Err(); err != nil {
			return fmt.Errorf("fill: xreadgroup %s: %w", key("stream"), err)
		}
	}
	return nil
}

// CompareKeys checks that every key exists on src and has the same TYPE,
// DEBUG DIGEST-VALUE and PEXPIRETIME (within 1 s; computed from PTTL on
// servers before 7.0, which lack PEXPIRETIME) on src and dst, and for
// streams the same XINFO GROUPS and XPENDING summaries. A key that exists
// on neither side is a difference too: the keys are ones the caller
// expects to exist, and two empty answers would prove nothing (see
// CompareKeysMayBeAbsent for keys that may have been deleted). The error
// names the first few keys that differ. Either side may be a
// *redis.ClusterClient.
func CompareKeys(ctx context.Context, src, dst redis.Cmdable, keys []string) error {
	_, err := compareKeys(ctx, src, dst, keys, false)
	return err
}

// CompareKeysMayBeAbsent is CompareKeys for keys that src may no longer
// hold (deleted, renamed away): such a key must be absent from dst too, a
// copy there is reported as resurrected. It returns how many of the keys
// src holds, so that the caller can tell a comparison of nothing.
func CompareKeysMayBeAbsent(ctx context.Context, src, dst redis.Cmdable, keys []string) (present int, err error) {
	return compareKeys(ctx, src, dst, keys, true)
}

func compareKeys(ctx context.Context, src, dst redis.Cmdable, keys []string, mayBeAbsent bool) (int, error) {
	var diffs []string
	total, present := 0, 0
	note := func(key, format string, args ...any) {
		total++
		if len(diffs) < 5 {
			diffs = append(diffs, fmt.Sprintf("%q: %s", key, fmt.Sprintf(format, args...)))
		}
	}
	const batch = 500
	for start := 0; start < len(keys); start += batch {
		part := keys[start:min(start+batch, len(keys))]
		a, err := describe(ctx, src, part)
		if err != nil {
			return 0, fmt.Errorf("compare: source: %w", err)
		}
		b, err := describe(ctx, dst, part)
		if err != nil {
			return 0, fmt.Errorf("compare: target: %w", err)
		}
		for i, key := range part {
			if a[i].exists() {
				present++
			}
			if d := diff(a[i], b[i], mayBeAbsent); d != "" {
				note(key, "%s", d)
			}
		}
	}
	if total > 0 {
		return present, fmt.Errorf("compare: %d of %d keys differ: %s", total, len(keys), strings.Join(diffs, "; "))
	}
	return present, nil
}

// diff says how the state y differs from the expected state x, or "".
// A key absent from x is expected absent from y only when mayBeAbsent.
func diff(x, y keyState, mayBeAbsent bool) string {
	switch {
	case !x.exists() && !y.exists():
		if mayBeAbsent {
			return ""
		}
		return "absent on both sides, expected to exist"
	case !x.exists():
		return fmt.Sprintf("resurrected: expected absent, found a %s", y.typ)
	case !y.exists():
		return fmt.Sprintf("missing: expected a %s", x.typ)
	case x.typ != y.typ:
		return fmt.Sprintf("type %s vs %s", x.typ, y.typ)
	case x.digest != y.digest:
		return fmt.Sprintf("digest %s vs %s", x.digest, y.digest)
	case (x.expire < 0 || y.expire < 0) && x.expire != y.expire,
		x.expire-y.expire > 1000 || y.expire-x.expire > 1000:
		return fmt.Sprintf("pexpiretime %d vs %d", x.expire, y.expire)
	case x.groups != y.groups:
		return fmt.Sprintf("stream groups\n  %s\nvs\n  %s", x.groups, y.groups)
	}
	return ""
}

type keyState struct {
	typ, digest string
	expire      int64
	groups      string // streams: XINFO GROUPS and XPENDING summaries, as text
}

// exists reports whether the key was there (TYPE answers "none" for no key).
func (k keyState) exists() bool { return k.typ != "" && k.typ != "none" }

// noDigest is DEBUG DIGEST-VALUE of a key that does not exist.
const noDigest = "0000000000000000000000000000000000000000"

func describe(ctx context.Context, c redis.Cmdable, keys []string) ([]keyState, error) {
	pipe := c.Pipeline()
	types := make([]*redis.StatusCmd, len(keys))
	digests := make([]*redis.Cmd, len(keys))
	expires := make([]*redis.DurationCmd, len(keys))
	// Before 7.0 there is no PEXPIRETIME: the expiry is the time of the
	// reply plus PTTL, the reply's time taken as the middle of the round
	// trip (well within the 1 s the comparison allows).
	relative := !atLeast(7, 0)
	for i, k := range keys {
		types[i] = pipe.Type(ctx, k)
		d := redis.NewCmd(ctx, "DEBUG", "DIGEST-VALUE", k)
		d.SetFirstKeyPos(2) // route by the key on a cluster
		_ = pipe.Process(ctx, d)
		digests[i] = d
		if relative {
			expires[i] = pipe.PTTL(ctx, k)
		} else {
			expires[i] = pipe.PExpireTime(ctx, k)
		}
	}
	sent := time.Now()
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	now := sent.Add(time.Since(sent) / 2).UnixMilli()
	out := make([]keyState, len(keys))
	for i := range keys {
		out[i].typ = types[i].Val()
		out[i].expire = int64(expires[i].Val()) // -1 none, -2 no key
		switch v := digests[i].Val().(type) {
		case string:
			out[i].digest = v
		case []any:
			if len(v) == 1 {
				out[i].digest = fmt.Sprint(v[0])
			}
		}
		// DEBUG is never redirected: a cluster client whose slot map is
		// stale sends it to a node without the key, which answers the
		// digest of nothing, while TYPE follows MOVED to the owner. Only an
		// empty stream has that digest (groups are not in it).
		if out[i].exists() && out[i].typ != "stream" && out[i].digest == noDigest {
			return nil, fmt.Errorf("DEBUG DIGEST-VALUE %q answered for no key, TYPE %s: sent to a node without the key (a cluster client's stale slot map?)", keys[i], out[i].typ)
		}
		if d := expires[i].Val(); d > 0 {
			out[i].expire = int64(d / time.Millisecond)
			if relative {
				out[i].expire += now
			}
		}
		if out[i].typ == "stream" {
			g, err := streamGroups(ctx, c, keys[i])
			if err != nil {
				return nil, err
			}
			out[i].groups = g
		}
	}
	return out, nil
}

func streamGroups(ctx context.Context, c redis.Cmdable, key string) (string, error) {
	groups, err := c.XInfoGroups(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("xinfo groups %s: %w", key, err)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "[%s consumers=%d pending=%d last=%s read=%d lag=%d", g.Name, g.Consumers, g.Pending, g.LastDeliveredID, g.EntriesRead, g.Lag)
		p, err := c.XPending(ctx, key, g.Name).Result()
		if err != nil {
			return "", fmt.Errorf("xpending %s %s: %w", key, g.Name, err)
		}
		names := make([]string, 0, len(p.Consumers))
		for n := range p.Consumers {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, " pel=%d %s..%s", p.Count, p.Lower, p.Higher)
		for _, n := range names {
			fmt.Fprintf(&b, " %s:%d", n, p.Consumers[n])
		}
		b.WriteString("] ")
	}
	return b.String(), nil
}
