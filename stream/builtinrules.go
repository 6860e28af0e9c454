package stream

import (
	"bytes"
	"strings"
)

// Commands whose class does not follow from their flags.
var (
	// The replication link itself emits these; they are Noop even if the
	// table lacks them or flags them oddly.
	forcedNoop = []string{"ping", "select", "replconf", "multi", "exec"}
	// SCRIPT LOAD/FLUSH change server state without the write flag. The
	// others are write-flagged already; listing them keeps them Keyless
	// should a server flag them differently.
	forcedKeyless = []string{
		"flushall", "flushdb", "swapdb",
		"function|load", "function|delete", "function|flush", "function|restore",
		"script|load", "script|flush",
	}
)

func (t *KeyTable) applyOverrides() {
	for _, name := range forcedNoop {
		if c := t.cmds[name]; c != nil {
			c.noop = true
		} else {
			t.cmds[name] = &cmdEntry{noop: true}
		}
	}
	for _, name := range forcedKeyless {
		parent, sub, isSub := strings.Cut(name, "|")
		c := t.cmds[parent]
		switch {
		case c == nil:
		case !isSub:
			c.keyless = true
		case c.subs != nil:
			if s := c.subs[sub]; s != nil {
				s.keyless = true
			}
		default:
			c.keylessArgs = append(c.keylessArgs, []byte(sub))
		}
	}
}

// Built-in rules for commands whose key specs (or, in 6.2, legacy range)
// do not cover every key. Each mirrors the command's own argument syntax.
var builtinRules = map[string]func(args [][]byte, keys []int) []int{
	"sort":              sortKeys,
	"migrate":           migrateKeys,
	"eval":              numkeysRule(2),
	"evalsha":           numkeysRule(2),
	"eval_ro":           numkeysRule(2),
	"evalsha_ro":        numkeysRule(2),
	"fcall":             numkeysRule(2),
	"fcall_ro":          numkeysRule(2),
	"zunion":            numkeysRule(1),
	"zinter":            numkeysRule(1),
	"zdiff":             numkeysRule(1),
	"zunionstore":       storeNumkeysRule,
	"zinterstore":       storeNumkeysRule,
	"zdiffstore":        storeNumkeysRule,
	"georadius":         geoRadiusKeys,
	"georadiusbymember": geoRadiusKeys,
	"xread":             streamsRule(1),
	"xreadgroup":        streamsRule(4), // after GROUP <group> <consumer>
}

// numkeysRule: the count is at index at, the keys follow it.
func numkeysRule(at int) func([][]byte, []int) []int {
	return func(args [][]byte, keys []int) []int { return appendNumkeys(args, keys, at) }
}

func appendNumkeys(args [][]byte, keys []int, at int) []int {
	if at >= len(args) {
		return keys
	}
	num, ok := parseCount(args[at])
	if !ok || at+num >= len(args) {
		return keys // a count past the end: malformed, as in the key specs
	}
	for i := at + 1; i <= at+num; i++ {
		keys = append(keys, i)
	}
	return keys
}

// storeNumkeysRule: ZUNIONSTORE dest numkeys key...
func storeNumkeysRule(args [][]byte, keys []int) []int {
	if len(args) < 2 {
		return keys
	}
	return appendNumkeys(args, append(keys, 1), 2)
}

// sortKeys: SORT key [BY p] [LIMIT o c] [GET p]... [ASC|DESC] [ALPHA] [STORE dest].
// BY/GET patterns name other keys by content; they are read, never written,
// so they are not reported. The last STORE wins, as in SORT itself.
func sortKeys(args [][]byte, keys []int) []int {
	if len(args) < 2 {
		return keys
	}
	keys = append(keys, 1)
	store := 0
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case bytes.EqualFold(a, []byte("limit")):
			i += 2
		case bytes.EqualFold(a, []byte("by")), bytes.EqualFold(a, []byte("get")):
			i++
		case bytes.EqualFold(a, []byte("store")) && i+1 < len(args):
			store = i + 1
			i++
		}
	}
	if store > 0 {
		keys = append(keys, store)
	}
	return keys
}

// migrateKeys: MIGRATE host port key|"" db timeout [COPY] [REPLACE]
// [AUTH pw | AUTH2 user pw] [KEYS key...]. The KEYS form needs an empty key.
func migrateKeys(args [][]byte, keys []int) []int {
	if len(args) < 4 {
		return keys
	}
	for i := 6; i < len(args); i++ {
		a := args[i]
		switch {
		case bytes.EqualFold(a, []byte("auth")):
			i++
		case bytes.EqualFold(a, []byte("auth2")):
			i += 2
		case bytes.EqualFold(a, []byte("keys")):
			if len(args[3]) != 0 || i == len(args)-1 {
				// Not the KEYS form (the server refuses it): report the
				// key argument, as COMMAND GETKEYS does.
				return append(keys, 3)
			}
			for j := i + 1; j < len(args); j++ {
				keys = append(keys, j)
			}
			return keys
		}
	}
	return append(keys, 3)
}

// geoRadiusKeys: the key, and the destination of STORE or STOREDIST (the
// last one given), which come after the fixed arguments.
func geoRadiusKeys(args [][]byte, keys []int) []int {
	if len(args) < 2 {
		return keys
	}
	keys = append(keys, 1)
	store := 0
	for i := 5; i < len(args)-1; i++ {
		if bytes.EqualFold(args[i], []byte("store")) || bytes.EqualFold(args[i], []byte("storedist")) {
			store = i + 1
			i++
		}
	}
	if store > 0 {
		keys = append(keys, store)
	}
	return keys
}

// streamsRule: ... STREAMS key... id..., the keys being the first half.
func streamsRule(from int) func([][]byte, []int) []int {
	return func(args [][]byte, keys []int) []int {
		for i := from; i < len(args); i++ {
			if !bytes.EqualFold(args[i], []byte("streams")) {
				continue
			}
			rest := len(args) - i - 1
			if rest == 0 || rest%2 != 0 {
				return keys
			}
			for j := i + 1; j <= i+rest/2; j++ {
				keys = append(keys, j)
			}
			return keys
		}
		return keys
	}
}
