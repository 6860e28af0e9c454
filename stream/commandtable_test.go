package stream

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
)

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
