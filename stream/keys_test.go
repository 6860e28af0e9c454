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

	"github.com/slotmover/slotmover/lab/localcluster"
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
