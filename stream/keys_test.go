package stream

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

func keyArgs(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// serverTable starts a cluster-mode server and loads its table over RESP3
// (go-redis's default).
func tableFromServer(t testing.TB) (*KeyTable, *redis.Client, *localcluster.Server) {
	t.Helper()
	s := harness.ServerT(t, localcluster.Options{Cluster: true})
	c := s.Client()
	t.Cleanup(func() { c.Close() })
	tbl, err := LoadKeyTable(context.Background(), c)
	if err != nil {
		t.Fatalf("LoadKeyTable: %v", err)
	}
	return tbl, c, s
}

// serverKeys asks the server which arguments are keys (COMMAND GETKEYS).
func serverGetKeys(ctx context.Context, c *redis.Client, args []string) ([]string, error) {
	cmd := []any{"COMMAND", "GETKEYS"}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	res, err := c.Do(ctx, cmd...).StringSlice()
	if err != nil {
		return nil, err
	}
	return res, nil
}

func keyNamesAt(args []string, keys []int) []string {
	out := []string{}
	for _, k := range keys {
		out = append(out, args[k])
	}
	return out
}

type classCase struct {
	args  []string
	class KeyClass
}

var classCases = []classCase{
	{[]string{"SET", "k", "v"}, ClassKeyed},
	{[]string{"set", "k", "v", "PXAT", "1700000000000"}, ClassKeyed},
	{[]string{"sEt", "{u}k", "v", "KEEPTTL", "GET"}, ClassKeyed},
	{[]string{"MSET", "{u}a", "1", "{u}b", "2"}, ClassKeyed},
	{[]string{"MSET", "a", "1", "b", "2"}, ClassCrossSlot},
	{[]string{"DEL", "a", "b"}, ClassCrossSlot},
	{[]string{"HSET", "h", "f", "v", "f2", "v2"}, ClassKeyed},
	{[]string{"RPUSH", "l", "a", "b"}, ClassKeyed},
	{[]string{"LMOVE", "{l}src", "{l}dst", "LEFT", "RIGHT"}, ClassKeyed},
	{[]string{"SMOVE", "{s}a", "{s}b", "m"}, ClassKeyed},
	{[]string{"ZADD", "z", "1", "m"}, ClassKeyed},
	{[]string{"ZUNIONSTORE", "{z}d", "2", "{z}a", "{z}b"}, ClassKeyed},
	{[]string{"ZUNIONSTORE", "{z}d", "2", "{z}a", "{z}b", "WEIGHTS", "1", "2", "AGGREGATE", "MAX"}, ClassKeyed},
	{[]string{"ZUNIONSTORE", "d", "2", "a", "b"}, ClassCrossSlot},
	{[]string{"ZRANGESTORE", "{z}d", "{z}a", "0", "-1"}, ClassKeyed},
	{[]string{"SINTERSTORE", "{s}d", "{s}a", "{s}b"}, ClassKeyed},
	{[]string{"XADD", "x", "*", "f", "v"}, ClassKeyed},
	{[]string{"XADD", "x", "MAXLEN", "~", "10", "1-1", "f", "v"}, ClassKeyed},
	{[]string{"XGROUP", "CREATE", "x", "g", "$", "MKSTREAM"}, ClassKeyed},
	{[]string{"xgroup", "setid", "x", "g", "0"}, ClassKeyed},
	{[]string{"XCLAIM", "x", "g", "c", "0", "1-1", "FORCE", "JUSTID"}, ClassKeyed},
	{[]string{"XSETID", "x", "1-1"}, ClassKeyed},
	{[]string{"RENAME", "{r}a", "{r}b"}, ClassKeyed},
	{[]string{"COPY", "{c}a", "{c}b", "REPLACE"}, ClassKeyed},
	{[]string{"SORT", "{q}l", "BY", "nosort", "STORE", "{q}d"}, ClassKeyed},
	{[]string{"sort", "{q}l", "LIMIT", "0", "10", "GET", "#", "ALPHA", "store", "{q}d"}, ClassKeyed},
	{[]string{"SORT", "l", "STORE", "d"}, ClassCrossSlot},
	{[]string{"SORT", "l"}, ClassKeyed},
	{[]string{"SORT_RO", "l", "BY", "nosort"}, ClassKeyed},
	{[]string{"BITOP", "AND", "{b}d", "{b}a", "{b}b"}, ClassKeyed},
	{[]string{"PFMERGE", "{p}d", "{p}a", "{p}b"}, ClassKeyed},
	{[]string{"GEOSEARCHSTORE", "{g}d", "{g}s", "FROMLONLAT", "0", "0", "BYRADIUS", "10", "km"}, ClassKeyed},
	{[]string{"GEORADIUS", "g", "0", "0", "10", "km"}, ClassKeyed},
	{[]string{"GEORADIUS", "{g}s", "0", "0", "10", "km", "COUNT", "3", "STORE", "{g}d"}, ClassKeyed},
	{[]string{"GEORADIUSBYMEMBER", "{g}s", "m", "10", "km", "STOREDIST", "{g}d"}, ClassKeyed},
	{[]string{"RESTORE", "k", "0", "\x00\x01x\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00", "REPLACE", "ABSTTL"}, ClassKeyed},
	{[]string{"DEL", "{d}a", "{d}b", "{d}c"}, ClassKeyed},
	{[]string{"UNLINK", "k"}, ClassKeyed},
	{[]string{"EXPIRE", "k", "10"}, ClassKeyed},
	{[]string{"PEXPIREAT", "k", "1700000000000"}, ClassKeyed},
	{[]string{"LMPOP", "2", "{m}a", "{m}b", "LEFT", "COUNT", "2"}, ClassKeyed},
	{[]string{"XREAD", "COUNT", "1", "STREAMS", "{x}a", "{x}b", "0", "0"}, ClassKeyed},
	{[]string{"MIGRATE", "127.0.0.1", "1", "", "0", "100", "COPY", "AUTH2", "u", "p", "KEYS", "{m}a", "{m}b"}, ClassKeyed},
	{[]string{"MIGRATE", "127.0.0.1", "1", "k", "0", "100", "REPLACE"}, ClassKeyed},
	{[]string{"EVAL", "return 1", "1", "k"}, ClassKeyed},
	{[]string{"EVALSHA", "0000000000000000000000000000000000000000", "2", "{e}a", "{e}b", "arg"}, ClassKeyed},
	{[]string{"FCALL", "f", "1", "k", "arg"}, ClassKeyed},
	{[]string{"PFCOUNT", "h"}, ClassKeyed},
	{[]string{"OBJECT", "ENCODING", "k"}, ClassKeyed},
	// No keys: a write the mover must act on, or nothing.
	{[]string{"EVAL", "return 1", "0"}, ClassNoop},
	{[]string{"FCALL", "f", "0"}, ClassNoop},
	{[]string{"FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('f', function() return 1 end)"}, ClassKeyless},
	{[]string{"function", "load", "REPLACE", "#!lua name=lib\n"}, ClassKeyless},
	{[]string{"FUNCTION", "DELETE", "lib"}, ClassKeyless},
	{[]string{"FUNCTION", "FLUSH", "ASYNC"}, ClassKeyless},
	{[]string{"FUNCTION", "RESTORE", "payload"}, ClassKeyless},
	{[]string{"SCRIPT", "LOAD", "return 1"}, ClassKeyless},
	{[]string{"SCRIPT", "FLUSH"}, ClassKeyless},
	{[]string{"FLUSHALL"}, ClassKeyless},
	{[]string{"FLUSHALL", "ASYNC"}, ClassKeyless},
	{[]string{"flushdb"}, ClassKeyless},
	{[]string{"SWAPDB", "0", "1"}, ClassKeyless},
	{[]string{"PING"}, ClassNoop},
	{[]string{"SELECT", "0"}, ClassNoop},
	{[]string{"MULTI"}, ClassNoop},
	{[]string{"EXEC"}, ClassNoop},
	{[]string{"REPLCONF", "GETACK", "*"}, ClassNoop},
	{[]string{"PUBLISH", "ch", "msg"}, ClassNoop},
	{[]string{"SPUBLISH", "ch", "msg"}, ClassNoop},
	// Not understood.
	{[]string{"NOSUCHCMD", "a", "b"}, ClassUnknown},
	{[]string{"XGROUP", "NOSUCH", "x"}, ClassUnknown},
	{[]string{"XGROUP"}, ClassUnknown},
	{[]string{"SET", "k"}, ClassUnknown},
	{[]string{"EXPIRE", "k", "10", "NX", "extra", "extra"}, ClassKeyed}, // arity is -3
	{[]string{"GET", "k", "extra"}, ClassUnknown},
}

// TestKeyTableMatchesServer checks Classify against the server's own
// COMMAND GETKEYS and CLUSTER KEYSLOT.
func TestKeyTableMatchesServer(t *testing.T) {
	ctx := context.Background()
	tbl, c, _ := tableFromServer(t)
	keyIdx := make([]int, 0, 8)
	for _, tc := range classCases {
		name := strings.Join(tc.args, " ")
		class, keys, slot := tbl.Classify(keyArgs(tc.args...), keyIdx)
		if class != tc.class {
			t.Errorf("%q: class %v, want %v (keys %v)", name, class, tc.class, keys)
			continue
		}
		got := keyNamesAt(tc.args, keys)
		switch class {
		case ClassKeyed, ClassCrossSlot:
			want, err := serverGetKeys(ctx, c, tc.args)
			if err != nil {
				t.Errorf("%q: COMMAND GETKEYS: %v", name, err)
				continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("%q: keys %q, server says %q", name, got, want)
			}
			distinct := map[int64]bool{}
			for _, k := range got {
				s, err := c.ClusterKeySlot(ctx, k).Result()
				if err != nil {
					t.Fatalf("CLUSTER KEYSLOT: %v", err)
				}
				distinct[s] = true
				if class == ClassKeyed && s != int64(slot) {
					t.Errorf("%q: slot %d, server says %d for %q", name, slot, s, k)
				}
			}
			if (class == ClassCrossSlot) != (len(distinct) > 1) {
				t.Errorf("%q: class %v but keys span %d slots", name, class, len(distinct))
			}
		case ClassNoop, ClassKeyless:
			if len(keys) != 0 {
				t.Errorf("%q: %v with keys %q", name, class, got)
			}
			// The server agrees there are none (or refuses to look for any).
			if want, err := serverGetKeys(ctx, c, tc.args); err == nil && len(want) != 0 {
				t.Errorf("%q: no keys found, server says %q", name, want)
			}
		}
	}
}

// TestKeyTableRESP2 loads the table over RESP2 (flat name/value arrays for the
// key specs instead of maps) and expects the same answers as over RESP3.
func TestKeyTableRESP2(t *testing.T) {
	ctx := context.Background()
	tbl3, _, s := tableFromServer(t)
	c2 := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1})
	defer c2.Close()
	raw, err := c2.Do(ctx, "COMMAND", "INFO", "set").Result()
	if err != nil {
		t.Fatal(err)
	}
	if spec := firstSpec(t, raw); fmt.Sprintf("%T", spec) != "[]interface {}" {
		t.Fatalf("RESP2 key spec is %T, want a flat array", spec)
	}
	c3 := s.Client()
	defer c3.Close()
	if raw3, err := c3.Do(ctx, "COMMAND", "INFO", "set").Result(); err != nil {
		t.Fatal(err)
	} else if spec := firstSpec(t, raw3); fmt.Sprintf("%T", spec) != "map[interface {}]interface {}" {
		t.Fatalf("RESP3 key spec is %T, want a map", spec)
	}
	if raw, err = c2.Do(ctx, "COMMAND").Result(); err != nil {
		t.Fatal(err)
	}
	tbl2, err := ParseCommandReply(raw)
	if err != nil {
		t.Fatalf("ParseCommandReply(RESP2): %v", err)
	}
	if len(tbl2.cmds) != len(tbl3.cmds) || len(tbl2.cmds) < 200 {
		t.Fatalf("RESP2 table has %d commands, RESP3 %d", len(tbl2.cmds), len(tbl3.cmds))
	}
	for _, tc := range classCases {
		c2, k2, s2 := tbl2.Classify(keyArgs(tc.args...), nil)
		c3, k3, s3 := tbl3.Classify(keyArgs(tc.args...), nil)
		if c2 != c3 || !slices.Equal(k2, k3) || s2 != s3 {
			t.Errorf("%q: RESP2 %v %v %d, RESP3 %v %v %d", tc.args, c2, k2, s2, c3, k3, s3)
		}
	}
}

// firstSpec digs the first key spec out of a COMMAND INFO reply for one command.
func firstSpec(t *testing.T, reply any) any {
	t.Helper()
	entries, ok := reply.([]any)
	if !ok || len(entries) != 1 {
		t.Fatalf("COMMAND INFO reply %T", reply)
	}
	entry, ok := entries[0].([]any)
	if !ok || len(entry) < 10 {
		t.Fatalf("COMMAND INFO entry %T", entries[0])
	}
	specs, ok := entry[8].([]any)
	if !ok || len(specs) == 0 {
		t.Fatalf("key specs %T", entry[8])
	}
	return specs[0]
}

// TestKeyTableAllCommands runs every command and subcommand of the table with
// random arguments (sprinkled with the keywords the key specs search for)
// and compares the keys with COMMAND GETKEYS wherever the server answers.
func TestKeyTableAllCommands(t *testing.T) {
	tbl, c, _ := tableFromServer(t)
	for seed := int64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testAllCommandsSeed(t, tbl, c, seed) })
	}
}

func testAllCommandsSeed(t *testing.T, tbl *KeyTable, c *redis.Client, seed int64) {
	ctx := context.Background()

	type named struct {
		words []string // name, or container and subcommand
		cmd   *cmdEntry
	}
	var all []named
	tokens := []string{"a", "{t}b", "c", "0", "1", "2", "3", "-1", "", "LIMIT", "GET", "BY", "AUTH", "AUTH2"}
	seenKw := map[string]bool{}
	addKeywords := func(c *cmdEntry) {
		for _, s := range c.specs {
			if s.begin == beginKeyword && !seenKw[string(s.keyword)] {
				seenKw[string(s.keyword)] = true
				tokens = append(tokens, string(s.keyword), strings.ToLower(string(s.keyword)))
			}
		}
	}
	for name, cmd := range tbl.cmds {
		if cmd.subs == nil {
			all = append(all, named{[]string{name}, cmd})
		}
		for sub, sc := range cmd.subs {
			all = append(all, named{[]string{name, sub}, sc})
		}
	}
	sort.Slice(all, func(i, j int) bool { return strings.Join(all[i].words, " ") < strings.Join(all[j].words, " ") })
	for _, n := range all {
		addKeywords(n.cmd)
	}
	rng := rand.New(rand.NewSource(seed))

	type trial struct {
		args []string
		cmd  *redis.StringSliceCmd
	}
	var trials []trial
	pipe := c.Pipeline()
	for _, n := range all {
		min := n.cmd.arity
		if min < 0 {
			min = -min
		}
		for v := 0; v < 60; v++ {
			size := min
			if n.cmd.arity <= 0 {
				size += rng.Intn(9)
			}
			args := append([]string(nil), n.words...)
			for len(args) < size {
				args = append(args, tokens[rng.Intn(len(tokens))])
			}
			if len(args) > size { // arity below the name's length: malformed anyway
				continue
			}
			cmd := []any{"COMMAND", "GETKEYS"}
			for _, a := range args {
				cmd = append(cmd, a)
			}
			trials = append(trials, trial{args, redis.NewStringSliceCmd(ctx, cmd...)})
			_ = pipe.Process(ctx, trials[len(trials)-1].cmd)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	checked, mismatches := 0, 0
	for _, tr := range trials {
		class, keys, _ := tbl.Classify(keyArgs(tr.args...), nil)
		want, err := tr.cmd.Result()
		if err != nil {
			continue // the server cannot say; Classify must merely not panic
		}
		checked++
		got := keyNamesAt(tr.args, keys)
		if len(want) == 0 && class != ClassKeyed && class != ClassCrossSlot {
			continue
		}
		if !slices.Equal(got, want) && !knownDisagreement(tr.args) {
			mismatches++
			if mismatches <= 30 {
				t.Errorf("%q: %v keys %q, server says %q", tr.args, class, got, want)
			}
		}
	}
	t.Logf("%d commands, %d trials, %d compared with COMMAND GETKEYS, %d mismatches", len(all), len(trials), checked, mismatches)
	if checked < len(trials)/3 {
		t.Errorf("only %d of %d trials could be compared", checked, len(trials))
	}
}

// knownDisagreement reports arguments where Classify and COMMAND GETKEYS are
// known to differ, Classify being the one that follows the command.
func knownDisagreement(args []string) bool {
	switch strings.ToLower(args[0]) {
	case "sort":
		// SORT skips the argument after STORE; the server's GETKEYS does not,
		// so in "STORE store x" or "STORE LIMIT ..." it names the wrong
		// destination (see TestSortStoreDestinationNamedLikeOption).
		for i := 2; i+1 < len(args); i++ {
			if strings.EqualFold(args[i], "store") {
				switch strings.ToLower(args[i+1]) {
				case "store", "limit", "get", "by":
					return true
				}
			}
		}
	case "xreadgroup":
		// Without GROUP the command is malformed and the server's fallback
		// scans for STREAMS from the first argument.
		return !strings.EqualFold(args[1], "group")
	}
	return false
}

// TestSortStoreDestinationNamedLikeOption runs SORT for real: the key after
// STORE is the destination even when it reads like an option, which
// COMMAND GETKEYS gets wrong and Classify gets right.
func TestSortStoreDestinationNamedLikeOption(t *testing.T) {
	ctx := context.Background()
	s := harness.ServerT(t, localcluster.Options{})
	c := s.Client()
	defer c.Close()
	tbl, err := LoadKeyTable(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"SORT", "k", "STORE", "store", "LIMIT", "0", "1"}
	if err := c.RPush(ctx, "k", 3, 1, 2).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := []any{}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	if err := c.Do(ctx, cmd...).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "store").Result(); err != nil || n != 1 {
		t.Fatalf("SORT did not write the key %q: %v %v", "store", n, err)
	}
	_, keys, _ := tbl.Classify(keyArgs(args...), nil)
	if got := keyNamesAt(args, keys); !slices.Equal(got, []string{"k", "store"}) {
		t.Errorf("keys %q, want [k store]", got)
	}
	// 7.0.15 answers [k LIMIT]; logged, not asserted, in case a release fixes it.
	if want, err := serverGetKeys(ctx, c, args); err == nil {
		t.Logf("COMMAND GETKEYS says %q", want)
	}
}

// legacyEntry is a Redis 6.2 COMMAND entry: no tips, key specs or subcommands.
func legacyEntry(name string, arity int64, flags []string, first, last, step int64) []any {
	fl := []any{}
	for _, f := range flags {
		fl = append(fl, f)
	}
	return []any{name, arity, fl, first, last, step, []any{"@keyspace"}}
}

// redis62Reply is a hand-made COMMAND reply in the shape Redis 6.2 sends.
func redis62Reply() []any {
	return []any{
		legacyEntry("get", 2, []string{"readonly", "fast"}, 1, 1, 1),
		legacyEntry("set", -3, []string{"write", "denyoom"}, 1, 1, 1),
		legacyEntry("mset", -3, []string{"write", "denyoom"}, 1, -1, 2),
		legacyEntry("del", -2, []string{"write"}, 1, -1, 1),
		legacyEntry("eval", -3, []string{"noscript", "may_replicate", "movablekeys"}, 0, 0, 0),
		legacyEntry("zunionstore", -4, []string{"write", "denyoom", "movablekeys"}, 0, 0, 0),
		legacyEntry("sort", -2, []string{"write", "denyoom", "movablekeys"}, 1, 1, 1),
		legacyEntry("georadius", -6, []string{"write", "movablekeys"}, 1, 1, 1),
		legacyEntry("xread", -4, []string{"readonly", "movablekeys"}, 0, 0, 0),
		legacyEntry("migrate", -6, []string{"write", "random", "movablekeys"}, 0, 0, 0),
		legacyEntry("xgroup", -2, []string{"write", "denyoom"}, 2, 2, 1),
		legacyEntry("script", -2, []string{"noscript", "may_replicate"}, 0, 0, 0),
		legacyEntry("flushall", -1, []string{"write"}, 0, 0, 0),
		legacyEntry("swapdb", 3, []string{"write", "fast"}, 0, 0, 0),
		legacyEntry("ping", -1, []string{"stale", "fast"}, 0, 0, 0),
		legacyEntry("select", 2, []string{"loading", "stale", "fast"}, 0, 0, 0),
		legacyEntry("multi", 1, []string{"noscript", "loading", "stale", "fast"}, 0, 0, 0),
		legacyEntry("exec", 1, []string{"noscript", "loading", "stale", "skip_slowlog"}, 0, 0, 0),
		// REPLCONF left out: the table supplies it anyway.
		legacyEntry("publish", 3, []string{"pubsub", "loading", "stale", "fast", "may_replicate"}, 0, 0, 0),
		legacyEntry("mymod.movable", -2, []string{"write", "module", "movablekeys"}, 0, 0, 0),
		legacyEntry("mymod.range", -3, []string{"write", "module"}, 1, 2, 1),
		legacyEntry("MyMod.Upper", 2, []string{"write", "module"}, 1, 1, 1),
	}
}

func TestParseCommandReplyRedis62(t *testing.T) {
	tbl, err := ParseCommandReply(redis62Reply())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args  []string
		class KeyClass
		keys  []int
	}{
		{[]string{"SET", "k", "v"}, ClassKeyed, []int{1}},
		{[]string{"set", "k", "v", "PXAT", "1"}, ClassKeyed, []int{1}},
		{[]string{"MSET", "{x}a", "1", "{x}b", "2"}, ClassKeyed, []int{1, 3}},
		{[]string{"MSET", "a", "1", "b", "2"}, ClassCrossSlot, []int{1, 3}},
		{[]string{"DEL", "{d}a", "{d}b", "{d}c"}, ClassKeyed, []int{1, 2, 3}},
		{[]string{"EVAL", "s", "2", "{e}a", "{e}b", "x"}, ClassKeyed, []int{3, 4}},
		{[]string{"EVAL", "s", "0"}, ClassNoop, nil},
		{[]string{"EVAL", "s", "3", "a"}, ClassNoop, nil}, // count past the end: malformed
		{[]string{"EVAL", "s", "-1", "a"}, ClassNoop, nil},
		{[]string{"ZUNIONSTORE", "{z}d", "2", "{z}a", "{z}b", "WEIGHTS", "1", "2"}, ClassKeyed, []int{1, 3, 4}},
		{[]string{"SORT", "{s}k", "BY", "w_*", "LIMIT", "0", "5", "GET", "#", "STORE", "{s}d"}, ClassKeyed, []int{1, 10}},
		{[]string{"SORT", "k"}, ClassKeyed, []int{1}},
		{[]string{"GEORADIUS", "{g}k", "0", "0", "1", "km", "STORE", "{g}d"}, ClassKeyed, []int{1, 7}},
		{[]string{"GEORADIUS", "{g}k", "0", "0", "1", "km", "STORE", "{g}d", "STOREDIST", "{g}e"}, ClassKeyed, []int{1, 9}},
		{[]string{"XREAD", "COUNT", "1", "STREAMS", "{x}a", "{x}b", "0", "0"}, ClassKeyed, []int{4, 5}},
		{[]string{"MIGRATE", "h", "1", "", "0", "10", "AUTH2", "u", "keys", "KEYS", "{m}a", "{m}b"}, ClassKeyed, []int{10, 11}},
		{[]string{"MIGRATE", "h", "1", "k", "0", "10", "REPLACE"}, ClassKeyed, []int{3}},
		{[]string{"XGROUP", "CREATE", "x", "g", "$"}, ClassKeyed, []int{2}},
		{[]string{"SCRIPT", "LOAD", "return 1"}, ClassKeyless, nil},
		{[]string{"script", "flush"}, ClassKeyless, nil},
		{[]string{"SCRIPT", "EXISTS", "abc"}, ClassNoop, nil},
		{[]string{"FLUSHALL"}, ClassKeyless, nil},
		{[]string{"SWAPDB", "0", "1"}, ClassKeyless, nil},
		{[]string{"PING"}, ClassNoop, nil},
		{[]string{"SELECT", "0"}, ClassNoop, nil},
		{[]string{"MULTI"}, ClassNoop, nil},
		{[]string{"EXEC"}, ClassNoop, nil},
		{[]string{"REPLCONF", "GETACK", "*"}, ClassNoop, nil},
		{[]string{"PUBLISH", "c", "m"}, ClassNoop, nil},
		// A module's movablekeys command: its keys are in code we cannot see.
		{[]string{"MYMOD.MOVABLE", "a", "b"}, ClassUnknown, nil},
		{[]string{"mymod.range", "{r}a", "{r}b", "v"}, ClassKeyed, []int{1, 2}},
		{[]string{"mymod.upper", "k"}, ClassKeyed, []int{1}},
		{[]string{"GET", "k", "x"}, ClassUnknown, nil},
		{[]string{"GETDEL", "k"}, ClassUnknown, nil},
	}
	for _, tc := range cases {
		class, keys, slot := tbl.Classify(keyArgs(tc.args...), nil)
		if class != tc.class || !slices.Equal(keys, tc.keys) {
			t.Errorf("%q: %v %v, want %v %v", tc.args, class, keys, tc.class, tc.keys)
		}
		if class == ClassKeyed && slot != slotsForKey(tc.args[keys[0]]) {
			t.Errorf("%q: slot %d", tc.args, slot)
		}
	}
}

func slotsForKey(k string) uint16 { return slots.ForKey([]byte(k)) }

// spec3 builds a key spec the way go-redis decodes it over RESP3.
func spec3(flags []string, bsType string, bs map[any]any, fkType string, fk map[any]any) map[any]any {
	fl := []any{}
	for _, f := range flags {
		fl = append(fl, f)
	}
	return map[any]any{
		"flags":        fl,
		"begin_search": map[any]any{"type": bsType, "spec": bs},
		"find_keys":    map[any]any{"type": fkType, "spec": fk},
	}
}

func entry7(name string, arity int64, flags []string, specs []any, subs []any) []any {
	e := legacyEntry(name, arity, flags, 0, 0, 0)
	return append(e, []any{}, specs, subs)
}

func bsIndex(i int64) map[any]any { return map[any]any{"index": i} }
func bsKeyword(kw string, from int64) map[any]any {
	return map[any]any{"keyword": kw, "startfrom": from}
}
func fkRange(last, step, limit int64) map[any]any {
	return map[any]any{"lastkey": last, "keystep": step, "limit": limit}
}
func fkKeynum(idx, first, step int64) map[any]any {
	return map[any]any{"keynumidx": idx, "firstkey": first, "keystep": step}
}

// handmade7Reply is a hand-made Redis 7 style reply (key specs as RESP3
// maps) with each kind of key spec, including forms no 7.0 built-in command
// uses outside a fallback (a backward keyword search, a keynum step of 2).
func handmade7Reply() []any {
	rw := []string{"RW", "update"}
	return []any{
		entry7("kw.back", -2, []string{"write"}, []any{spec3(rw, "keyword", bsKeyword("KEYS", -2), "range", fkRange(-1, 1, 0))}, nil),
		entry7("kw.fwd", -2, []string{"write"}, []any{
			spec3(rw, "index", bsIndex(1), "range", fkRange(0, 1, 0)),
			spec3([]string{"OW"}, "keyword", bsKeyword("STORE", 2), "range", fkRange(0, 1, 0)),
		}, nil),
		entry7("lim", -4, []string{"write"}, []any{spec3(rw, "keyword", bsKeyword("STREAMS", 1), "range", fkRange(-1, 1, 2))}, nil),
		entry7("pairs", -3, []string{"write"}, []any{spec3(rw, "index", bsIndex(1), "range", fkRange(-1, 2, 0))}, nil),
		entry7("knum", -3, []string{"write"}, []any{spec3(rw, "index", bsIndex(2), "keynum", fkKeynum(0, 1, 2))}, nil),
		entry7("bad.step", -2, []string{"write"}, []any{spec3(rw, "index", bsIndex(1), "range", fkRange(0, 0, 0))}, nil),
		entry7("future", -2, []string{"write"}, []any{spec3(rw, "index", bsIndex(1), "spiral", map[any]any{})}, nil),
		entry7("half", -2, []string{"write"}, []any{
			spec3(rw, "index", bsIndex(1), "range", fkRange(0, 1, 0)),
			spec3(append(rw, "incomplete"), "keyword", bsKeyword("MORE", 2), "range", fkRange(-1, 1, 0)),
		}, nil),
		entry7("ro.unknown", -2, []string{"write", "movablekeys"}, []any{
			spec3([]string{"RO", "access"}, "index", bsIndex(1), "range", fkRange(0, 1, 0)),
			spec3([]string{"RO", "access"}, "unknown", map[any]any{}, "unknown", map[any]any{}),
		}, nil),
		entry7("shard.pub", 3, []string{"pubsub"}, []any{spec3([]string{"not_key"}, "index", bsIndex(1), "range", fkRange(0, 1, 0))}, nil),
		entry7("getkeys.api", -2, []string{"write", "module", "movablekeys"}, []any{}, nil),
		entry7("cont", -2, nil, []any{}, []any{
			entry7("cont|put", -3, []string{"write"}, []any{spec3(rw, "index", bsIndex(2), "range", fkRange(0, 1, 0))}, nil),
			entry7("cont|reset", 2, []string{"write"}, []any{}, nil),
			entry7("cont|help", 2, []string{"loading"}, []any{}, nil),
		}),
	}
}

// TestKeySpecs exercises each kind of key spec on handmade7Reply.
func TestKeySpecs(t *testing.T) {
	tbl, err := ParseCommandReply(handmade7Reply())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args  []string
		class KeyClass
		keys  []int
	}{
		{[]string{"kw.back", "{a}x", "KEYS", "{a}b", "{a}c"}, ClassKeyed, []int{3, 4}},
		{[]string{"kw.back", "KEYS", "x", "keys", "{a}y"}, ClassKeyed, []int{4}}, // the last KEYS
		{[]string{"kw.back", "x", "KEYS"}, ClassKeyless, nil},                    // keyword with nothing after
		{[]string{"kw.back", "KEYS"}, ClassKeyless, nil},                         // never the command name
		{[]string{"KW.FWD", "{k}", "x", "STORE", "{k}d"}, ClassKeyed, []int{1, 4}},
		{[]string{"kw.fwd", "{k}", "x", "STORE"}, ClassKeyed, []int{1}},
		{[]string{"kw.fwd", "STORE", "STORE", "{STORE}d"}, ClassKeyed, []int{1, 3}}, // startfrom is inclusive
		{[]string{"kw.fwd", "STORE", "{STORE}x"}, ClassKeyed, []int{1}},             // and nothing before it
		{[]string{"lim", "STREAMS", "{s}a", "{s}b", "0", "0"}, ClassKeyed, []int{2, 3}},
		{[]string{"lim", "COUNT", "5", "STREAMS", "{s}a", "0"}, ClassKeyed, []int{4}},
		{[]string{"pairs", "{p}a", "1", "{p}b", "2"}, ClassKeyed, []int{1, 3}},
		{[]string{"knum", "x", "2", "{n}a", "v", "{n}b", "v"}, ClassKeyed, []int{3, 5}},
		{[]string{"knum", "x", "0"}, ClassKeyless, nil},
		{[]string{"knum", "x", "3", "a", "v", "b"}, ClassKeyless, nil},
		{[]string{"knum", "x", "99999999999999999999", "a"}, ClassKeyless, nil},
		{[]string{"knum", "x", "02", "a", "v", "b"}, ClassKeyless, nil}, // not the server's integer form
		{[]string{"knum", "x", "-1", "a"}, ClassKeyless, nil},
		{[]string{"bad.step", "a"}, ClassUnknown, nil},
		{[]string{"future", "a"}, ClassUnknown, nil},
		{[]string{"half", "{h}a", "MORE", "{h}b"}, ClassKeyed, []int{1, 3}},
		{[]string{"ro.unknown", "a", "BY", "p"}, ClassKeyed, []int{1}},
		{[]string{"shard.pub", "ch", "m"}, ClassNoop, nil},
		{[]string{"getkeys.api", "a"}, ClassUnknown, nil},
		{[]string{"CONT", "PUT", "k", "v"}, ClassKeyed, []int{2}},
		{[]string{"cont", "Reset"}, ClassKeyless, nil},
		{[]string{"cont", "help"}, ClassNoop, nil},
		{[]string{"cont", "nope"}, ClassUnknown, nil},
		{[]string{"cont"}, ClassUnknown, nil},
	}
	for _, tc := range cases {
		class, keys, _ := tbl.Classify(keyArgs(tc.args...), make([]int, 0, 1))
		if class != tc.class || !slices.Equal(keys, tc.keys) {
			t.Errorf("%q: %v %v, want %v %v", tc.args, class, keys, tc.class, tc.keys)
		}
	}
}

func TestParseCommandReplyErrors(t *testing.T) {
	good := legacyEntry("get", 2, []string{"readonly"}, 1, 1, 1)
	with := func(i int, v any) []any {
		e := append([]any(nil), good...)
		e[i] = v
		return []any{e}
	}
	specEntry := func(spec any) []any {
		return []any{entry7("x", -2, []string{"write"}, []any{spec}, nil)}
	}
	bad := map[string]any{
		"nil":                nil,
		"string":             "OK",
		"integer":            int64(1),
		"empty":              []any{},
		"entry not an array": []any{"get"},
		"short entry":        []any{[]any{"get", int64(2)}},
		"name not a string":  with(0, int64(5)),
		"empty name":         with(0, ""),
		"arity not a number": with(1, []any{}),
		"arity text":         with(1, "two"),
		"huge arity":         with(1, int64(1)<<40),
		"flags not a list":   with(2, int64(1)),
		"flag not a string":  with(2, []any{int64(1)}),
		"first key":          with(3, nil),
		"specs not a list":   []any{append(legacyEntry("x", 2, nil, 0, 0, 0), []any{}, "specs")},
		"subs not a list":    []any{append(legacyEntry("x", 2, nil, 0, 0, 0), []any{}, []any{}, int64(3))},
		"bad subcommand":     []any{entry7("x", -2, nil, []any{}, []any{[]any{"x|y"}})},
		"spec odd array":     specEntry([]any{"flags"}),
		"spec not a map":     specEntry(int64(7)),
		"spec name":          specEntry([]any{int64(1), "x"}),
		"begin_search int":   specEntry(map[any]any{"begin_search": int64(1)}),
		"find_keys type":     specEntry(map[any]any{"find_keys": map[any]any{"type": int64(1)}}),
		"index not a number": specEntry(spec3(nil, "index", map[any]any{"index": "one"}, "range", fkRange(0, 1, 0))),
		"keyword not text":   specEntry(spec3(nil, "keyword", map[any]any{"keyword": int64(1), "startfrom": int64(1)}, "range", fkRange(0, 1, 0))),
		"spec body":          specEntry(spec3(nil, "index", nil, "range", nil)),
	}
	for name, reply := range bad {
		if name == "spec body" {
			// Missing spec bodies are not a structural fault: the spec is
			// unusable and the command's keys unknown.
			tbl, err := ParseCommandReply(reply)
			if err != nil {
				t.Errorf("%s: %v", name, err)
			} else if class, _, _ := tbl.Classify(keyArgs("x", "k"), nil); class != ClassUnknown {
				t.Errorf("%s: class %v, want unknown", name, class)
			}
			continue
		}
		if tbl, err := ParseCommandReply(reply); err == nil {
			t.Errorf("%s: no error (table of %d)", name, len(tbl.cmds))
		}
	}
}

// TestClassifyMalformed feeds truncated, padded and garbage commands: the
// answer may be anything but a panic, and keys must be in range.
func TestClassifyMalformed(t *testing.T) {
	live, _, _ := tableFromServer(t)
	old, err := ParseCommandReply(redis62Reply())
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"", "0", "1", "2", "-1", "-2", "99999999999999999999", "2147483648", "STORE", "KEYS",
		"STREAMS", "LIMIT", "GET", "BY", "AUTH", "AUTH2", "STOREDIST", "k", "{x}"}
	rnd := rand.New(rand.NewSource(7))
	check := func(tbl *KeyTable, args [][]byte) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic on %q: %v", args, r)
			}
		}()
		_, keys, _ := tbl.Classify(args, nil)
		for _, k := range keys {
			if k < 1 || k >= len(args) {
				t.Fatalf("%q: key index %d out of range", args, k)
			}
		}
	}
	for _, tbl := range []*KeyTable{live, old, nil} {
		check(tbl, nil)
		for name := range live.cmds {
			for n := 0; n < 12; n++ {
				args := [][]byte{[]byte(name)}
				for len(args) < n {
					args = append(args, []byte(words[rnd.Intn(len(words))]))
				}
				check(tbl, args)
			}
		}
		for _, tc := range classCases {
			for n := 0; n <= len(tc.args); n++ {
				check(tbl, keyArgs(tc.args[:n]...))
			}
		}
	}
}

var allocCases = [][]string{
	{"SET", "user:1000", "v", "PXAT", "1700000000000"},
	{"set", "k", "v"},
	{"HSET", "h", "f", "v"},
	{"DEL", "{d}a", "{d}b"},
	{"UNLINK", "k"},
	{"XADD", "s", "1-1", "f", "v"},
	{"EXPIRE", "k", "10"},
	{"PEXPIREAT", "k", "1700000000000"},
	{"ZUNIONSTORE", "{z}d", "2", "{z}a", "{z}b"},
	{"XGROUP", "CREATE", "s", "g", "$"},
	{"MULTI"}, {"EXEC"}, {"PING"}, {"SELECT", "0"}, {"REPLCONF", "GETACK", "*"},
	{"FLUSHALL"},
}

func TestClassifyDoesNotAllocate(t *testing.T) {
	tbl, _, _ := tableFromServer(t)
	keyIdx := make([]int, 0, 8)
	for _, a := range allocCases {
		args := keyArgs(a...)
		if n := testing.AllocsPerRun(100, func() { tbl.Classify(args, keyIdx) }); n != 0 {
			t.Errorf("%q: %.1f allocations per call", a, n)
		}
	}
	// The built-in rules, as a 6.2 table uses them.
	old, err := ParseCommandReply(redis62Reply())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{
		{"SORT", "k", "BY", "nosort", "LIMIT", "0", "1", "STORE", "d"},
		{"ZUNIONSTORE", "{z}d", "2", "{z}a", "{z}b"},
		{"EVAL", "s", "1", "k"},
		{"GEORADIUS", "k", "0", "0", "1", "km", "STORE", "d"},
		{"XREAD", "STREAMS", "a", "0"},
		{"MIGRATE", "h", "1", "", "0", "1", "KEYS", "a"},
		{"script", "load", "return 1"},
	} {
		args := keyArgs(a...)
		if n := testing.AllocsPerRun(100, func() { old.Classify(args, keyIdx) }); n != 0 {
			t.Errorf("6.2 table, %q: %.1f allocations per call", a, n)
		}
	}
}

func BenchmarkClassifySET(b *testing.B) {
	tbl, _, _ := tableFromServer(b)
	args := keyArgs("SET", "user:1000:profile", "some value", "PXAT", "1700000000000")
	keyIdx := make([]int, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		class, keys, _ := tbl.Classify(args, keyIdx)
		if class != ClassKeyed || len(keys) != 1 {
			b.Fatal(class, keys)
		}
	}
}

// FuzzClassify runs Classify on arbitrary commands against the hand-made
// tables; it must never panic or report a key outside args.
func FuzzClassify(f *testing.F) {
	tables := []*KeyTable{}
	for _, reply := range [][]any{redis62Reply(), handmade7Reply()} {
		tbl, err := ParseCommandReply(reply)
		if err != nil {
			f.Fatal(err)
		}
		tables = append(tables, tbl)
	}
	f.Add("SET k v")
	f.Add("EVAL s 2 a b")
	f.Add("MIGRATE h p  0 1 KEYS a b")
	f.Add("SORT k LIMIT 0 STORE")
	f.Add("GEORADIUS k 0 0 1 km STORE")
	f.Add("XREAD STREAMS a")
	f.Add("kw.back KEYS a KEYS")
	f.Add("knum x 2 a b c")
	f.Add("lim STREAMS a b 0")
	f.Add("cont put k v")
	f.Fuzz(func(t *testing.T, line string) {
		args := keyArgs(strings.Split(line, " ")...)
		for _, tbl := range tables {
			_, keys, _ := tbl.Classify(args, nil)
			for _, k := range keys {
				if k < 1 || k >= len(args) {
					t.Fatalf("%q: key index %d", line, k)
				}
			}
		}
	})
}
