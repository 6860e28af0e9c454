package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
)

// KeyClass says what the mover must do with one command of the replication stream.
type KeyClass uint8

const (
	// ClassNoop: PING, SELECT, REPLCONF, MULTI, EXEC and other commands that
	// change no data; only the offset advances. Transaction markers are the
	// caller's business.
	ClassNoop KeyClass = iota
	// ClassKeyed: a command with keys, all in one slot.
	ClassKeyed
	// ClassCrossSlot: a command whose keys are in more than one slot.
	ClassCrossSlot
	// ClassKeyless: a write with no keys that the mover must act on
	// (FLUSHALL, FLUSHDB, SWAPDB, FUNCTION LOAD/DELETE/FLUSH/RESTORE,
	// SCRIPT LOAD/FLUSH, any other write-flagged command without keys).
	ClassKeyless
	// ClassUnknown: not in the table, a subcommand the table does not know,
	// a wrong number of arguments, or a command whose key positions the
	// table cannot work out (see KeyTable) and where none were found.
	ClassUnknown
)

func (c KeyClass) String() string {
	switch c {
	case ClassNoop:
		return "noop"
	case ClassKeyed:
		return "keyed"
	case ClassCrossSlot:
		return "cross-slot"
	case ClassKeyless:
		return "keyless"
	case ClassUnknown:
		return "unknown"
	}
	return "KeyClass(" + strconv.Itoa(int(c)) + ")"
}

// KeyTable knows, for each command (and subcommand) name, where its keys are
// and whether it writes. It is built from the source's own COMMAND reply, so
// module commands are covered the same way as built-in ones. It is read-only
// once built and safe for concurrent use.
//
// Key positions come from the Redis 7 key specs when the reply has them, and
// from the legacy first/last/step triple otherwise (Redis 6.2). Where neither
// describes every key (SORT's STORE, MIGRATE's KEYS, and in 6.2 every
// movablekeys command), a built-in rule for the known commands takes over:
// SORT, MIGRATE, EVAL/EVALSHA(_RO), FCALL(_RO), ZUNION/ZINTER/ZDIFF(STORE),
// GEORADIUS(BYMEMBER) and XREAD(GROUP). Any other such command (a module's
// movablekeys command without key specs, say) gets the keys the table can
// see; when it sees none, Classify answers ClassUnknown rather than guess
// that the command had no keys.
type KeyTable struct {
	cmds map[string]*cmdEntry
}

// cmdEntry is one COMMAND entry (a command or a subcommand).
type cmdEntry struct {
	arity int
	write bool
	// noop and keyless force a class whatever the flags say (see overrides).
	noop    bool
	keyless bool
	// keylessArgs: for a container command without subcommand entries
	// (Redis 6.2's SCRIPT), the first arguments that make it keyless.
	keylessArgs [][]byte

	hasSpecs bool // the reply had a key-specs element (7.x), so specs rule
	specs    []keySpec
	first    int // legacy key range, used when !hasSpecs
	last     int
	step     int

	// rule replaces specs and the legacy range for commands whose keys
	// neither describes completely.
	rule func(args [][]byte, keys []int) []int
	// incomplete: some keys may be missed, and no rule is known.
	incomplete bool

	subs map[string]*cmdEntry
}

type beginKind uint8

const (
	beginIndex beginKind = iota + 1
	beginKeyword
)

type findKind uint8

const (
	findRange findKind = iota + 1
	findKeynum
)

// keySpec is one usable Redis 7 key spec.
type keySpec struct {
	begin   beginKind
	index   int    // beginIndex: argument index; beginKeyword: startfrom
	keyword []byte // beginKeyword

	find      findKind
	lastkey   int // findRange
	limit     int // findRange
	keystep   int // both, >= 1
	keynumidx int // findKeynum, relative to where the search began
	firstkey  int // findKeynum, relative to where the search began
}

// LoadKeyTable runs COMMAND on c and builds the table from the reply.
func LoadKeyTable(ctx context.Context, c *redis.Client) (*KeyTable, error) {
	// Raw, because go-redis's CommandInfo drops the key specs.
	reply, err := c.Do(ctx, "COMMAND").Result()
	if err != nil {
		return nil, fmt.Errorf("COMMAND: %w", err)
	}
	t, err := ParseCommandReply(reply)
	if err != nil {
		return nil, fmt.Errorf("COMMAND: %w", err)
	}
	return t, nil
}

// ParseCommandReply builds a table from a COMMAND reply as go-redis returns it
// from Do(...).Result(): nested []interface{} (RESP2), with key specs as flat
// name/value arrays, or as map[interface{}]interface{} (RESP3).
func ParseCommandReply(reply any) (*KeyTable, error) {
	t := &KeyTable{cmds: make(map[string]*cmdEntry)}
	add := func(v any) error {
		if v == nil { // COMMAND INFO answers nil for names it does not know
			return nil
		}
		name, c, err := parseCmdEntry(v, false)
		if err != nil {
			return err
		}
		t.cmds[name] = c
		return nil
	}
	switch r := reply.(type) {
	case []any:
		for i, v := range r {
			if err := add(v); err != nil {
				return nil, fmt.Errorf("entry %d: %w", i, err)
			}
		}
	case map[any]any:
		for k, v := range r {
			if err := add(v); err != nil {
				return nil, fmt.Errorf("entry %v: %w", k, err)
			}
		}
	default:
		return nil, fmt.Errorf("reply is %T, not an array", reply)
	}
	if len(t.cmds) == 0 {
		return nil, errors.New("no commands in the reply")
	}
	t.applyOverrides()
	return t, nil
}

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

// Classify returns the command's class, the indexes in args of its keys
// (appended to keyIdx[:0], so a reused slice avoids allocating), and their
// slot (meaningful for ClassKeyed; for ClassCrossSlot it is the first key's).
// args[0] is the command name in any case. A malformed command yields
// ClassUnknown or the keys that are present, never a panic.
//
// Any command with keys is Keyed or CrossSlot whatever its flags: the stream
// only carries what changed the source (PFCOUNT may rewrite its HLL, say).
func (t *KeyTable) Classify(args [][]byte, keyIdx []int) (class KeyClass, keys []int, slot uint16) {
	keys = keyIdx[:0]
	if t == nil || len(args) == 0 {
		return ClassUnknown, keys, 0
	}
	c := lookupEntry(t.cmds, args[0])
	if c == nil {
		return ClassUnknown, keys, 0
	}
	if c.noop {
		return ClassNoop, keys, 0
	}
	if c.subs != nil {
		if len(args) < 2 {
			return ClassUnknown, keys, 0
		}
		if c = lookupEntry(c.subs, args[1]); c == nil {
			return ClassUnknown, keys, 0
		}
		if c.noop {
			return ClassNoop, keys, 0
		}
	}
	// The server checks arity before running a command, so a violation
	// means the stream was misread.
	if n := len(args); (c.arity > 0 && n != c.arity) || (c.arity < 0 && n < -c.arity) {
		return ClassUnknown, keys, 0
	}
	keys = c.appendKeys(args, keys)
	if len(keys) == 0 {
		switch {
		case c.incomplete:
			return ClassUnknown, keys, 0
		case c.write || c.keyless || c.keylessArg(args):
			return ClassKeyless, keys, 0
		}
		// Not a write (EVAL with no keys, PUBLISH): nothing to move.
		return ClassNoop, keys, 0
	}
	slot = slots.ForKey(args[keys[0]])
	for _, k := range keys[1:] {
		if slots.ForKey(args[k]) != slot {
			return ClassCrossSlot, keys, slot
		}
	}
	return ClassKeyed, keys, slot
}

// lookupEntry finds name, ASCII case-insensitively as the server does,
// without allocating for names that fit the stack buffer (all real ones do).
func lookupEntry(m map[string]*cmdEntry, name []byte) *cmdEntry {
	var buf [64]byte
	if len(name) > len(buf) {
		return m[asciiLower(string(name))]
	}
	for i, b := range name {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		buf[i] = b
	}
	return m[string(buf[:len(name)])]
}

// asciiLower lowers A-Z only, matching lookupEntry (strings.ToLower would
// also fold non-ASCII letters, which the server does not).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func (c *cmdEntry) keylessArg(args [][]byte) bool {
	if len(args) < 2 {
		return false
	}
	for _, a := range c.keylessArgs {
		if bytes.EqualFold(args[1], a) {
			return true
		}
	}
	return false
}

func (c *cmdEntry) appendKeys(args [][]byte, keys []int) []int {
	switch {
	case c.rule != nil:
		return c.rule(args, keys)
	case c.hasSpecs:
		for i := range c.specs {
			keys = c.specs[i].appendKeys(args, keys)
		}
		return keys
	}
	return appendRange(keys, c.first, c.last, c.step, len(args))
}

// appendRange appends first, first+step, ... up to last (negative: counted
// from the end), stopping at the end of the arguments.
func appendRange(keys []int, first, last, step, n int) []int {
	if first <= 0 || step <= 0 {
		return keys
	}
	if last < 0 {
		last += n
	}
	for i := first; i <= last && i < n; i += step {
		keys = append(keys, i)
	}
	return keys
}

// appendKeys evaluates the spec the way the server does: begin_search finds
// where the keys start, find_keys how many follow. A keyword that is absent
// yields nothing (SORT without STORE); positions past the end are dropped.
func (s *keySpec) appendKeys(args [][]byte, keys []int) []int {
	n := len(args)
	first := -1
	switch s.begin {
	case beginIndex:
		first = s.index
	case beginKeyword:
		if s.index > 0 {
			// Forward; a keyword in the last argument has no key after it.
			for i := s.index; i < n-1; i++ {
				if bytes.EqualFold(args[i], s.keyword) {
					first = i + 1
					break
				}
			}
		} else {
			// Backward from the end, never into the command name.
			for i := min(n+s.index, n-1); i >= 1; i-- {
				if bytes.EqualFold(args[i], s.keyword) {
					first = i + 1
					break
				}
			}
		}
	}
	if first < 1 || first >= n {
		return keys
	}
	var last int
	switch s.find {
	case findRange:
		switch {
		case s.lastkey >= 0:
			last = first + s.lastkey
		case s.limit <= 1:
			last = n + s.lastkey
		default:
			// Keys take 1/limit of what follows (XREAD's STREAMS k1 k2 id1 id2).
			last = first + (n-first)/s.limit + s.lastkey
		}
	case findKeynum:
		at := first + s.keynumidx
		if at >= n {
			return keys
		}
		num, ok := parseCount(args[at])
		if !ok {
			return keys
		}
		first += s.firstkey
		// A count running past the arguments is a malformed command (the
		// server refuses it): no keys from this spec, as COMMAND GETKEYS.
		// Compared by division so that no product can overflow.
		if num == 0 || first >= n || num-1 > (n-1-first)/s.keystep {
			return keys
		}
		last = first + (num-1)*s.keystep
	default:
		return keys
	}
	for i := first; i <= last && i < n; i += s.keystep {
		keys = append(keys, i)
	}
	return keys
}

// parseCount parses a non-negative decimal in the server's strict form (no
// sign, no leading zeros). Values beyond 1<<30 fail: no command has that
// many arguments, and it keeps the arithmetic above from overflowing.
func parseCount(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	v := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		v = v*10 + int(d-'0')
	}
	if v > 1<<30 {
		return 0, false
	}
	return v, true
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

// parseCmdEntry reads one COMMAND entry: name, arity, flags, first key, last
// key, step, ACL categories, and in 7.x tips, key specs and subcommands.
func parseCmdEntry(v any, isSub bool) (string, *cmdEntry, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 6 {
		return "", nil, fmt.Errorf("command entry is %T of %d elements, want an array of at least 6", v, replyLen(v))
	}
	fullName, err := replyString(arr[0])
	if err != nil {
		return "", nil, fmt.Errorf("name: %w", err)
	}
	fullName = asciiLower(fullName)
	if fullName == "" {
		return "", nil, errors.New("empty command name")
	}
	name := fullName
	if isSub {
		// Subcommands are listed as "container|sub".
		if _, sub, ok := strings.Cut(fullName, "|"); ok {
			name = sub
		}
	}
	c := &cmdEntry{}
	ints := [4]*int{&c.arity, &c.first, &c.last, &c.step}
	for i, at := range [4]int{1, 3, 4, 5} {
		n, err := replyInt(arr[at])
		if err != nil {
			return "", nil, fmt.Errorf("%s: element %d: %w", fullName, at+1, err)
		}
		*ints[i] = n
	}
	flags, err := replyStrings(arr[2])
	if err != nil {
		return "", nil, fmt.Errorf("%s: flags: %w", fullName, err)
	}
	movable := false
	for _, f := range flags {
		switch strings.ToLower(f) {
		case "write":
			c.write = true
		case "movablekeys":
			movable = true
		}
	}
	if len(arr) > 8 {
		c.hasSpecs = true
		list, err := replyList(arr[8])
		if err != nil {
			return "", nil, fmt.Errorf("%s: key specs: %w", fullName, err)
		}
		for i, sv := range list {
			spec, use, err := parseSpec(sv)
			if err != nil {
				return "", nil, fmt.Errorf("%s: key spec %d: %w", fullName, i+1, err)
			}
			switch use {
			case specUse:
				c.specs = append(c.specs, spec)
			case specUseIncomplete:
				c.specs = append(c.specs, spec)
				c.incomplete = true
			case specUnusable:
				c.incomplete = true
			}
		}
		// A movablekeys command with no spec at all finds its keys in code
		// the table cannot see (a module's getkeys callback).
		if movable && len(c.specs) == 0 {
			c.incomplete = true
		}
	} else if movable {
		// Before 7.0 the legacy range covers only the fixed keys, if any.
		c.incomplete = true
	} else if c.first > 0 && c.step <= 0 {
		c.incomplete = true
	}
	if c.incomplete {
		if r := builtinRules[fullName]; r != nil {
			c.rule, c.incomplete = r, false
		}
	}
	if len(arr) > 9 {
		list, err := replyList(arr[9])
		if err != nil {
			return "", nil, fmt.Errorf("%s: subcommands: %w", fullName, err)
		}
		for i, sv := range list {
			subName, sub, err := parseCmdEntry(sv, true)
			if err != nil {
				return "", nil, fmt.Errorf("%s: subcommand %d: %w", fullName, i+1, err)
			}
			if c.subs == nil {
				c.subs = make(map[string]*cmdEntry, len(list))
			}
			c.subs[subName] = sub
		}
	}
	return name, c, nil
}

type specUsage uint8

const (
	specUse           specUsage = iota
	specUseIncomplete           // usable, but may miss keys of a write
	specSkip                    // not keys, or keys only read and unlocatable
	specUnusable                // written keys the spec cannot locate
)

// parseSpec reads one key spec. Structural faults are errors; a spec whose
// types or values this code does not know (a newer server, an odd module)
// is reported unusable instead, so one command cannot spoil the table.
func parseSpec(v any) (keySpec, specUsage, error) {
	var s keySpec
	var flags []string
	var bsType, fkType string
	var bsSpec, fkSpec any
	err := replyPairs(v, func(k string, val any) error {
		var err error
		switch k {
		case "flags":
			flags, err = replyStrings(val)
		case "begin_search":
			bsType, bsSpec, err = typedSpec(val)
		case "find_keys":
			fkType, fkSpec, err = typedSpec(val)
		}
		return err
	})
	if err != nil {
		return s, 0, err
	}
	var notKey, incomplete, ro, writes bool
	for _, f := range flags {
		switch strings.ToLower(f) {
		case "not_key":
			notKey = true
		case "incomplete":
			incomplete = true
		case "ro", "read": // "read"/"write": 7.0 release candidates
			ro = true
		case "rw", "ow", "rm", "write":
			writes = true
		}
	}
	if notKey {
		// SPUBLISH's shard channel: routed like a key, but no data.
		return s, specSkip, nil
	}
	// A spec without access flags (a module's, say) may write.
	readOnly := ro && !writes
	usable := true
	ints := map[string]*int{}
	switch bsType {
	case "index":
		s.begin = beginIndex
		ints["index"] = &s.index
	case "keyword":
		s.begin = beginKeyword
		ints["startfrom"] = &s.index
	default: // "unknown", or newer than this code
		usable = false
	}
	switch fkType {
	case "range":
		s.find = findRange
		ints["lastkey"], ints["keystep"], ints["limit"] = &s.lastkey, &s.keystep, &s.limit
	case "keynum":
		s.find = findKeynum
		ints["keynumidx"], ints["firstkey"], ints["keystep"] = &s.keynumidx, &s.firstkey, &s.keystep
	default:
		usable = false
	}
	if usable {
		seen := map[string]bool{}
		get := func(k string, val any) error {
			if k == "keyword" && s.begin == beginKeyword {
				kw, err := replyString(val)
				s.keyword = []byte(kw)
				seen[k] = true
				return err
			}
			if p := ints[k]; p != nil {
				n, err := replyInt(val)
				if err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
				*p = n
				seen[k] = true
			}
			return nil
		}
		if err := replyPairs(bsSpec, get); err != nil {
			return s, 0, fmt.Errorf("begin_search: %w", err)
		}
		if err := replyPairs(fkSpec, get); err != nil {
			return s, 0, fmt.Errorf("find_keys: %w", err)
		}
		for k := range ints {
			usable = usable && seen[k]
		}
		// Values that would make the search meaningless or endless.
		switch {
		case s.begin == beginIndex && s.index < 1,
			s.begin == beginKeyword && (s.index == 0 || len(s.keyword) == 0 || !seen["keyword"]),
			s.keystep < 1, s.limit < 0, s.keynumidx < 0, s.firstkey < 0:
			usable = false
		}
	}
	switch {
	case !usable && readOnly:
		// SORT's BY/GET patterns: keys read, not written; nothing to move.
		return s, specSkip, nil
	case !usable:
		return s, specUnusable, nil
	case incomplete && !readOnly:
		return s, specUseIncomplete, nil
	}
	return s, specUse, nil
}

// typedSpec reads {type: ..., spec: {...}} of begin_search or find_keys.
func typedSpec(v any) (string, any, error) {
	var typ string
	var spec any
	err := replyPairs(v, func(k string, val any) error {
		var err error
		switch k {
		case "type":
			typ, err = replyString(val)
		case "spec":
			spec = val
		}
		return err
	})
	return strings.ToLower(typ), spec, err
}

// forEachPair walks a RESP2 flat name/value array or a RESP3 map.
func replyPairs(v any, fn func(k string, val any) error) error {
	switch m := v.(type) {
	case nil:
		return nil
	case []any:
		if len(m)%2 != 0 {
			return fmt.Errorf("name/value array of odd length %d", len(m))
		}
		for i := 0; i < len(m); i += 2 {
			k, err := replyString(m[i])
			if err != nil {
				return fmt.Errorf("name: %w", err)
			}
			if err := fn(strings.ToLower(k), m[i+1]); err != nil {
				return err
			}
		}
		return nil
	case map[any]any:
		for kv, val := range m {
			k, err := replyString(kv)
			if err != nil {
				return fmt.Errorf("name: %w", err)
			}
			if err := fn(strings.ToLower(k), val); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for k, val := range m {
			if err := fn(strings.ToLower(k), val); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%T is neither a map nor a name/value array", v)
}

func replyString(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", fmt.Errorf("%T is not a string", v)
}

func replyInt(v any) (int, error) {
	const limit = 1 << 30 // far beyond any argument index; keeps sums in range
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case string:
		var err error
		if n, err = strconv.ParseInt(x, 10, 64); err != nil {
			return 0, fmt.Errorf("%q is not an integer", x)
		}
	default:
		return 0, fmt.Errorf("%T is not an integer", v)
	}
	if n > limit || n < -limit {
		return 0, fmt.Errorf("%d is out of range", n)
	}
	return int(n), nil
}

func replyList(v any) ([]any, error) {
	switch l := v.(type) {
	case nil:
		return nil, nil
	case []any:
		return l, nil
	}
	return nil, fmt.Errorf("%T is not an array", v)
}

func replyStrings(v any) ([]string, error) {
	var out []string
	switch l := v.(type) {
	case nil, []any:
		list, _ := replyList(l)
		for _, e := range list {
			s, err := replyString(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	case map[any]any:
		// A RESP3 set decoded as a map of members.
		for k := range l {
			s, err := replyString(k)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	default:
		return nil, fmt.Errorf("%T is not an array", v)
	}
	return out, nil
}

func replyLen(v any) int {
	if l, ok := v.([]any); ok {
		return len(l)
	}
	return 0
}
