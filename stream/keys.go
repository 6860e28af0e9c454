package stream

import (
	"bytes"
	"strconv"

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
