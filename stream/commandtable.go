package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
