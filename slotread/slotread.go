// Package slotread reads the keys of chosen slots from a live source, with
// no fork and no RDB: a snapshot in short calls (scripts or transactions),
// each of which writes a marker key (SET then DEL, in one slot) as its
// last step. The source's replication stream shows the marker as MULTI;
// SET; DEL; EXEC at the exact point of that call, so the stream commands
// before it are in what the call read, and those after it are not.
//
// A slot is first listed (List), then its keys read in batches bounded by
// a budget of elements (ReadTx for keys known small, Read for others),
// so that no call holds the source's main thread for long. A key too big
// for one call is not read but reported, and read in chunks (ReadChunk).
package slotread

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// listScript lists the keys of the slots ARGV[3…] (at most ARGV[1] in
// all, else it answers the count it found, and writes nothing), then
// writes the marker KEYS[1] with the value ARGV[2].
var listScript = redis.NewScript(`
local limit = tonumber(ARGV[1])
local total = 0
for i = 3, #ARGV do
  total = total + redis.call('CLUSTER', 'COUNTKEYSINSLOT', tonumber(ARGV[i]))
end
if total > limit then return total end
local out = {}
for i = 3, #ARGV do
  local n = redis.call('CLUSTER', 'COUNTKEYSINSLOT', tonumber(ARGV[i]))
  out[#out + 1] = redis.call('CLUSTER', 'GETKEYSINSLOT', tonumber(ARGV[i]), n)
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[1])
return out
`)

// sizeOf is a Lua function giving a key's type and size in units: its
// elements, or for a string its bytes / 64 (O(1) either way).
const sizeOf = `
local lengthOf = {string = 'STRLEN', hash = 'HLEN', list = 'LLEN', set = 'SCARD', zset = 'ZCARD', stream = 'XLEN'}
local function sizeOf(k)
  local t = redis.call('TYPE', k).ok
  if not lengthOf[t] then return t, 0 end
  local n = redis.call(lengthOf[t], k)
  if t == 'string' then n = math.floor(n / 64) end
  return t, n
end
`

// readBody reads the keys in order until the budget ARGV[2] (elements;
// a string counts a unit per 64 bytes) is spent, at least one key; a key
// over ARGV[3] units is reported as big and not read. Then it writes the
// marker KEYS[1] with ARGV[1]. It answers the source's TIME and, per key
// it reached: {'read', DUMP, PTTL}, {'gone'} or {'big', type, units}.
const readBody = sizeOf + `
local budget, big = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis.call('TIME')
local out, used = {}, 0
for _, k in ipairs(keys) do
  local t, units = sizeOf(k)
  if units > big then
    out[#out + 1] = {'big', t, units}
  elseif #out > 0 and used + units > budget then
    break
  elseif t == 'none' then
    out[#out + 1] = {'gone'}
  else
    used = used + units + 1
    out[#out + 1] = {'read', redis.call('DUMP', k), redis.call('PTTL', k)}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[1])
return {now[1], now[2], out}
`

// The read scripts by where the keys are: from KEYS[2…], all of the
// marker's slot; or from ARGV[4…], of any slots of the node, as a script may
// access keys it did not declare, of several slots, with
// allow-cross-slot-keys (Redis 7.0+). Batches then span slots, where a move
// of many small slots would otherwise make a call per slot.
var readScripts = map[bool]*redis.Script{
	false: redis.NewScript("local keys = {unpack(KEYS, 2)}\n" + readBody),
	true:  redis.NewScript("#!lua flags=allow-cross-slot-keys\nlocal keys = {unpack(ARGV, 4)}\n" + readBody),
}

// surveyScript answers, for the slots ARGV[2…], how many keys they hold,
// those over ARGV[1] units (as sizeOf counts them) as {key, type,
// units}, the DUMP of one small key (its RDB version), and the others'
// names and units (flat: name, units, name, …); it writes nothing.
var surveyScript = redis.NewScript(sizeOf + `
local big = tonumber(ARGV[1])
local total, found, sample, small = 0, {}, false, {}
for i = 2, #ARGV do
  local slot = tonumber(ARGV[i])
  local n = redis.call('CLUSTER', 'COUNTKEYSINSLOT', slot)
  total = total + n
  for _, k in ipairs(redis.call('CLUSTER', 'GETKEYSINSLOT', slot, n)) do
    local t, units = sizeOf(k)
    if units > big then
      found[#found + 1] = {k, t, units}
    elseif t ~= 'none' then
      small[#small + 1] = k
      small[#small + 1] = units
    end
    if not sample and t ~= 'none' and units <= 16 then sample = redis.call('DUMP', k) end
  end
end
return {total, found, sample, small}
`)

// TooManyKeys is List's answer when the slots hold more keys than it may
// list in one call.
type TooManyKeys struct{ Keys int64 }

func (e *TooManyKeys) Error() string {
	return fmt.Sprintf("the slots hold %d keys, more than one call may list", e.Keys)
}

// List returns the keys of slots, slot by slot, in one call that ends
// with the marker (a key in one of the slots, or any slot's if all are
// empty) set to nonce. It lists at most limit keys, else *TooManyKeys.
func List(ctx context.Context, c *redis.Client, slots []uint16, marker, nonce string, limit int) ([][]string, error) {
	args := []any{limit, nonce}
	for _, s := range slots {
		args = append(args, s)
	}
	v, err := run(ctx, c, listScript, []string{marker}, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("list the keys of %d slots on %s: %w", len(slots), c.Options().Addr, err)
	}
	if n, ok := v.(int64); ok {
		return nil, &TooManyKeys{Keys: n}
	}
	lists, ok := v.([]any)
	if !ok || len(lists) != len(slots) {
		return nil, fmt.Errorf("list the keys of %d slots on %s: unexpected answer %T", len(slots), c.Options().Addr, v)
	}
	out := make([][]string, len(lists))
	for i, l := range lists {
		keys, _ := l.([]any)
		for _, k := range keys {
			s, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("list the keys of slot %d: unexpected key %T", slots[i], k)
			}
			out[i] = append(out[i], s)
		}
	}
	return out, nil
}

// Key is one key as Read found it.
type Key struct {
	Name     string
	Gone     bool   // it no longer exists
	Payload  []byte // its DUMP
	ExpireAt int64  // Unix ms on the source's clock; 0 for no TTL
	Big      bool   // over the limit: not read
	Type     string // for a big key
	Units    int64  // for a big key: its elements (a string: bytes/64)
}

// Limits bound a Read call.
type Limits struct {
	Budget int64 // elements (or 64-byte units of strings) read per call
	Big    int64 // a key over this many is not read, but reported Big
	// AnySlot lets the keys of one call be of several slots (Redis 7.0+).
	AnySlot bool
}

// Read reads keys, from the first on, until lim.Budget is spent, in one
// call that ends with the marker (a key of the first key's slot) set to
// nonce. The keys are of one slot, or of any with lim.AnySlot. It
// returns the keys it reached, at least the first.
func Read(ctx context.Context, c *redis.Client, keys []string, marker, nonce string, lim Limits) ([]Key, error) {
	var v any
	var err error
	script := readScripts[lim.AnySlot]
	if lim.AnySlot {
		args := append(make([]any, 0, 3+len(keys)), nonce, lim.Budget, lim.Big)
		for _, k := range keys {
			args = append(args, k)
		}
		v, err = run(ctx, c, script, []string{marker}, args...).Result()
	} else {
		v, err = run(ctx, c, script, append([]string{marker}, keys...), nonce, lim.Budget, lim.Big).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("read %d keys on %s: %w", len(keys), c.Options().Addr, err)
	}
	fail := func(what string) ([]Key, error) {
		return nil, fmt.Errorf("read %d keys on %s: unexpected answer: %s", len(keys), c.Options().Addr, what)
	}
	top, ok := v.([]any)
	if !ok || len(top) != 3 {
		return fail("not {time, keys}")
	}
	now, err := scriptTime(top[0], top[1])
	if err != nil {
		return fail(err.Error())
	}
	entries, ok := top[2].([]any)
	if !ok || len(entries) == 0 || len(entries) > len(keys) {
		return fail(fmt.Sprintf("%d keys", len(entries)))
	}
	out := make([]Key, len(entries))
	for i, e := range entries {
		f, _ := e.([]any)
		k := Key{Name: keys[i]}
		switch tag, _ := first(f); {
		case tag == "gone":
			k.Gone = true
		case tag == "read" && len(f) == 3:
			payload, ok1 := f[1].(string)
			pttl, ok2 := f[2].(int64)
			if !ok1 || !ok2 {
				return fail("a key read without payload or TTL")
			}
			k.Payload = []byte(payload)
			switch {
			case pttl >= 0:
				k.ExpireAt = now + pttl
			case pttl == -2: // expired as the call began
				k.Gone, k.Payload = true, nil
			}
		case tag == "big" && len(f) == 3:
			k.Big = true
			k.Type, _ = f[1].(string)
			k.Units, _ = f[2].(int64)
		default:
			return fail(fmt.Sprintf("entry %v", f))
		}
		out[i] = k
	}
	return out, nil
}

// Survey is what a survey found in some slots.
type Survey struct {
	Keys   int64
	Big    []Key  // keys over the limit
	Small  []Key  // the other keys, with their units
	Sample []byte // the DUMP of one small key, for its RDB version; nil if none
}

// SurveySlots counts the keys of slots, finds those over big units and
// samples a DUMP, in one call that writes nothing. It reads every key's
// type and length, so its slots should hold a bounded number of keys.
func SurveySlots(ctx context.Context, c *redis.Client, slots []uint16, big int64) (Survey, error) {
	args := []any{big}
	for _, s := range slots {
		args = append(args, s)
	}
	fail := func(err error) (Survey, error) {
		return Survey{}, fmt.Errorf("survey %d slots on %s: %w", len(slots), c.Options().Addr, err)
	}
	v, err := run(ctx, c, surveyScript, nil, args...).Result()
	if err != nil {
		return fail(err)
	}
	top, ok := v.([]any)
	if !ok || len(top) != 4 {
		return fail(fmt.Errorf("unexpected answer %T", v))
	}
	var sv Survey
	small, _ := top[3].([]any)
	for i := 0; i+1 < len(small); i += 2 {
		name, ok1 := small[i].(string)
		units, ok2 := small[i+1].(int64)
		if !ok1 || !ok2 {
			return fail(fmt.Errorf("small key entry %v, %v", small[i], small[i+1]))
		}
		sv.Small = append(sv.Small, Key{Name: name, Units: units})
	}
	sv.Keys, _ = top[0].(int64)
	if sample, ok := top[2].(string); ok {
		sv.Sample = []byte(sample)
	}
	found, _ := top[1].([]any)
	for _, e := range found {
		f, _ := e.([]any)
		if len(f) != 3 {
			return fail(fmt.Errorf("big key entry %v", f))
		}
		k := Key{Big: true}
		k.Name, _ = f[0].(string)
		k.Type, _ = f[1].(string)
		k.Units, _ = f[2].(int64)
		sv.Big = append(sv.Big, k)
	}
	return sv, nil
}

// Batch is the keys of one slot for ReadTx, and the marker (a key of that
// slot) its transaction sets to Nonce.
type Batch struct {
	Keys          []string
	Marker, Nonce string
}

// ReadTx reads every key of each batch, with no sizing and no budget (the
// caller knows them small), in a transaction of its own: MULTI; TIME; DUMP
// and PTTL of each key; SET and DEL of the marker; EXEC. The stream shows
// the marker as a script's would. A transaction is not a script: it costs
// the source about a third of the main thread's time a script takes for
// the same reads, and each is short, so other clients are served between
// them. All the batches go in one round trip. It returns the keys of the
// batches that ran, up to the first that did not, and that one's error
// (a refused transaction wrote nothing: its batch can be read again).
func ReadTx(ctx context.Context, c *redis.Client, batches []Batch) ([][]Key, error) {
	txs := make([][][]any, len(batches))
	for i, b := range batches {
		txs[i] = append(dumpCommands(b.Keys), []any{"SET", b.Marker, b.Nonce}, []any{"DEL", b.Marker})
	}
	ran, txErr := transactions(ctx, c, txs)
	out := make([][]Key, 0, len(batches))
	for i, replies := range ran {
		b := batches[i]
		if len(replies) != 3+2*len(b.Keys) {
			return out, fmt.Errorf("read %d keys on %s: EXEC answered %d replies", len(b.Keys), c.Options().Addr, len(replies))
		}
		keys, err := parseDumps(replies[:len(replies)-2], b.Keys)
		if err != nil {
			return out, fmt.Errorf("read %d keys on %s: %w", len(b.Keys), c.Options().Addr, err)
		}
		out = append(out, keys)
	}
	if txErr != nil {
		b := batches[len(ran)]
		return out, fmt.Errorf("read %d keys on %s: %w", len(b.Keys), c.Options().Addr, txErr)
	}
	return out, nil
}

// ReadAt reads keys as ReadTx does, but writes no marker: the transaction
// starts with ROLE, and the source's replication offset it answers is the
// point of the stream the copies show (every command of the stream up to
// it is in them, none after it). A transaction that writes nothing runs
// during a CLIENT PAUSE WRITE, where a marker's write would wait for the
// pause to end.
func ReadAt(ctx context.Context, c *redis.Client, keys []string) (_ []Key, at int64, _ error) {
	fail := func(err error) ([]Key, int64, error) {
		return nil, 0, fmt.Errorf("read %d keys on %s: %w", len(keys), c.Options().Addr, err)
	}
	tx := append([][]any{{"ROLE"}}, dumpCommands(keys)...)
	ran, err := transactions(ctx, c, [][][]any{tx})
	if err != nil {
		return fail(err)
	}
	replies := ran[0]
	if len(replies) != 2+2*len(keys) {
		return fail(fmt.Errorf("EXEC answered %d replies", len(replies)))
	}
	role, _ := replies[0].([]any)
	if len(role) < 2 || role[0] != "master" {
		return fail(fmt.Errorf("ROLE answered %v: the source is no longer a master", replies[0]))
	}
	at, ok := role[1].(int64)
	if !ok || at < 0 {
		return fail(fmt.Errorf("ROLE answered offset %v", role[1]))
	}
	got, err := parseDumps(replies[1:], keys)
	if err != nil {
		return fail(err)
	}
	return got, at, nil
}

// dumpCommands reads keys in a transaction: TIME, then DUMP and PTTL of each.
func dumpCommands(keys []string) [][]any {
	tx := make([][]any, 0, 1+2*len(keys))
	tx = append(tx, []any{"TIME"})
	for _, k := range keys {
		tx = append(tx, []any{"DUMP", k}, []any{"PTTL", k})
	}
	return tx
}

// parseDumps reads the replies of dumpCommands.
func parseDumps(replies []any, names []string) ([]Key, error) {
	t, _ := replies[0].([]any)
	if len(t) != 2 {
		return nil, fmt.Errorf("TIME answered %v", replies[0])
	}
	now, err := scriptTime(t[0], t[1])
	if err != nil {
		return nil, err
	}
	keys := make([]Key, len(names))
	for j, name := range names {
		k := Key{Name: name}
		payload, pttl := replies[1+2*j], replies[2+2*j]
		switch d, ok := payload.(string); {
		case payload == nil:
			k.Gone = true
		case !ok:
			return nil, fmt.Errorf("DUMP of %q answered %T", name, payload)
		default:
			k.Payload = []byte(d)
			switch ms, _ := pttl.(int64); {
			case ms >= 0:
				k.ExpireAt = now + ms
			case ms == -2: // expired between the DUMP and the PTTL: not possible in a transaction, but cheap to handle
				k.Gone, k.Payload = true, nil
			}
		}
		keys[j] = k
	}
	return keys, nil
}

// transactions sends each of txs as MULTI, its commands, EXEC, all in one
// round trip. It returns EXEC's replies of the transactions that ran, up to
// the first that did not, and that one's reason.
func transactions(ctx context.Context, c *redis.Client, txs [][][]any) ([][]any, error) {
	execs := make([]*redis.Cmd, len(txs))
	queued := make([][]*redis.Cmd, len(txs))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, tx := range txs {
			queued[i] = append(queued[i], p.Do(ctx, "MULTI"))
			for _, args := range tx {
				queued[i] = append(queued[i], p.Do(ctx, args...))
			}
			execs[i] = p.Do(ctx, "EXEC")
		}
		return nil
	})
	out := make([][]any, 0, len(txs))
	for i, exec := range execs {
		replies, err := exec.Slice()
		if err != nil {
			// The reason is in the first command refused as it was queued
			// (CLUSTERDOWN, say); EXEC only says that it discarded them.
			for _, q := range queued[i] {
				if q.Err() != nil {
					return out, q.Err()
				}
			}
			return out, err
		}
		out = append(out, replies)
	}
	return out, nil
}

func first(f []any) (string, bool) {
	if len(f) == 0 {
		return "", false
	}
	s, ok := f[0].(string)
	return s, ok
}

// scriptTime reads TIME's two fields, as a script returns them, in Unix ms.
func scriptTime(sec, usec any) (int64, error) {
	parse := func(v any) (int64, error) {
		switch x := v.(type) {
		case string:
			return strconv.ParseInt(x, 10, 64)
		case int64:
			return x, nil
		}
		return 0, fmt.Errorf("TIME field %T", v)
	}
	s, err := parse(sec)
	if err != nil {
		return 0, err
	}
	us, err := parse(usec)
	if err != nil {
		return 0, err
	}
	return time.Unix(s, us*1000).UnixMilli(), nil
}

// chunkScript reads one chunk of a big hash KEYS[2] with its fields'
// expiries (Redis 7.4+): a scan from the cursor ARGV[2] (COUNT ARGV[3]),
// provided its type is still a hash, then its PTTL and HPEXPIRETIME of the
// fields found, which only a script can name in the same call; then it
// writes the marker KEYS[1] with ARGV[1]. It answers the source's TIME and
// {type, next cursor, elements, PTTL, field expiries}.
var chunkScript = redis.NewScript(`
local now = redis.call('TIME')
local t = redis.call('TYPE', KEYS[2]).ok
local out = {t, '0', {}, -2, {}}
if t == 'hash' then
  local r = redis.call('HSCAN', KEYS[2], ARGV[2], 'COUNT', ARGV[3])
  out = {t, r[1], r[2], redis.call('PTTL', KEYS[2]), {}}
  if #r[2] > 0 then
    local fields = {}
    for i = 1, #r[2], 2 do fields[#fields + 1] = r[2][i] end
    out[5] = redis.call('HPEXPIRETIME', KEYS[2], 'FIELDS', #fields, unpack(fields))
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[1])
return {now[1], now[2], out}
`)

// ScanCommand is the command by which ReadChunk scans each of ScanTypes.
var ScanCommand = map[string]string{"hash": "HSCAN", "set": "SSCAN", "zset": "ZSCAN"}

// chunkTx reads a chunk in a transaction: MULTI; TIME; TYPE; the read
// (a scan, or a range of a sorted set); PTTL; SET and DEL of the marker;
// EXEC. A script would convert every element to a Lua string and back,
// which costs the source's main thread about 40% more for the same read.
// It answers the source's TIME (Unix ms), the key's type, the read's reply
// (whatever it was if the key is now of another type) and its PTTL.
func chunkTx(ctx context.Context, c *redis.Client, key string, read []any, marker, nonce string) (now int64, t string, reply any, pttl int64, err error) {
	ran, err := transactions(ctx, c, [][][]any{{
		{"TIME"}, {"TYPE", key}, read, {"PTTL", key},
		{"SET", marker, nonce}, {"DEL", marker},
	}})
	if err != nil {
		return 0, "", nil, 0, err
	}
	r := ran[0]
	clock, _ := r[0].([]any)
	if len(r) != 6 || len(clock) != 2 {
		return 0, "", nil, 0, fmt.Errorf("EXEC answered %v", r)
	}
	if now, err = scriptTime(clock[0], clock[1]); err != nil {
		return 0, "", nil, 0, err
	}
	t, _ = r[1].(string)
	pttl, _ = r[3].(int64)
	return now, t, r[2], pttl, nil
}

// Chunk is one chunk of a big key, as ReadChunk found it.
type Chunk struct {
	Type     string   // the key's type now ("none" once it is gone)
	Cursor   string   // the scan's next cursor; "0" when the scan is over
	Elements []string // as HSCAN, SSCAN or ZSCAN returns them
	ExpireAt int64    // Unix ms on the source's clock; 0 for no TTL; -1 if the key is gone
	// FieldExpireAt holds a hash's field expiries (Unix ms; -1 for none),
	// one per field of Elements, when asked for.
	FieldExpireAt []int64
	// Moved: a range's set changed before the chunk (see ReadRange).
	Moved bool
}

// ScanTypes are the types ReadChunk reads: those whose commands name
// their elements, so that a chunk read at one point of the stream and the
// commands after it make the key whole.
var ScanTypes = []string{"hash", "set", "zset"}

// ReadChunk reads the chunk of key (of type typ) after cursor, about count
// elements, in one transaction that ends with the marker (a key of its
// slot) set to nonce. fieldTTLs asks for a hash's field expiries (Redis
// 7.4+), which takes a script.
func ReadChunk(ctx context.Context, c *redis.Client, key, typ, cursor string, count int, marker, nonce string, fieldTTLs bool) (Chunk, error) {
	fail := func(err error) (Chunk, error) {
		return Chunk{}, fmt.Errorf("read a chunk of %q on %s: %w", key, c.Options().Addr, err)
	}
	var ch Chunk
	var ttls []any
	if fieldTTLs && typ == "hash" {
		v, err := run(ctx, c, chunkScript, []string{marker, key}, nonce, cursor, count).Result()
		if err != nil {
			return fail(err)
		}
		top, ok := v.([]any)
		if !ok || len(top) != 3 {
			return fail(fmt.Errorf("unexpected answer %T", v))
		}
		now, err := scriptTime(top[0], top[1])
		if err != nil {
			return fail(err)
		}
		f, _ := top[2].([]any)
		if len(f) != 5 {
			return fail(fmt.Errorf("unexpected answer %v", top[2]))
		}
		ch.Type, _ = f[0].(string)
		ch.Cursor, _ = f[1].(string)
		pttl, _ := f[3].(int64)
		ch.ExpireAt = expireAt(now, pttl)
		if ch.Elements, err = stringsOf(f[2]); err != nil {
			return fail(err)
		}
		ttls, _ = f[4].([]any)
	} else {
		now, t, reply, pttl, err := chunkTx(ctx, c, key, []any{ScanCommand[typ], key, cursor, "COUNT", count}, marker, nonce)
		if err != nil {
			return fail(err)
		}
		ch = Chunk{Type: t, Cursor: "0", ExpireAt: expireAt(now, pttl)}
		if t == typ { // else gone, or made anew as another type: the scan failed or saw nothing
			scan, _ := reply.([]any)
			if len(scan) != 2 {
				return fail(fmt.Errorf("%s answered %v", ScanCommand[typ], reply))
			}
			ch.Cursor, _ = scan[0].(string)
			if ch.Elements, err = stringsOf(scan[1]); err != nil {
				return fail(err)
			}
		}
	}
	for _, e := range ttls {
		n, _ := e.(int64)
		ch.FieldExpireAt = append(ch.FieldExpireAt, n)
	}
	if ch.Cursor == "" {
		return fail(errors.New("no cursor"))
	}
	return ch, nil
}

// ReadRange reads the chunk of the sorted set key that follows after (the
// member and score that ended the last chunk; nil for the first) in the
// set's order, about count members, in one transaction that ends with the
// marker set to nonce. rank is where the last chunk's end left the next
// member: the transaction reads from the one before it, and the chunk
// holds the members after it only if that one is still after; else the
// set has changed before it, and Moved says so (no elements). Cursor is
// the rank of the next chunk, "0" at the end.
//
// A range costs the source about a third of a scan of the same members,
// and members that come in order cost the target's ZADD about half of
// those in a scan's order (docs/benchmarks.md).
func ReadRange(ctx context.Context, c *redis.Client, key string, rank int64, after []string, count int, marker, nonce string) (Chunk, error) {
	fail := func(err error) (Chunk, error) {
		return Chunk{}, fmt.Errorf("read a range of %q on %s: %w", key, c.Options().Addr, err)
	}
	from := rank
	if after != nil {
		from--
	}
	now, t, reply, pttl, err := chunkTx(ctx, c, key, []any{"ZRANGE", key, from, rank + int64(count) - 1, "WITHSCORES"}, marker, nonce)
	if err != nil {
		return fail(err)
	}
	ch := Chunk{Type: t, Cursor: "0", ExpireAt: expireAt(now, pttl)}
	if t != "zset" {
		return ch, nil
	}
	if ch.Elements, err = rangeOf(reply); err != nil {
		return fail(err)
	}
	if after != nil {
		if len(ch.Elements) < 2 || ch.Elements[0] != after[0] || ch.Elements[1] != after[1] {
			ch.Elements, ch.Moved = nil, true
			return ch, nil
		}
		ch.Elements = ch.Elements[2:]
	}
	if len(ch.Elements) == 2*count {
		ch.Cursor = strconv.FormatInt(rank+int64(count), 10)
	}
	return ch, nil
}

// expireAt is the Unix ms at which a key whose PTTL was pttl at now
// expires: 0 for no TTL, -1 for no key.
func expireAt(now, pttl int64) int64 {
	switch {
	case pttl >= 0:
		return now + pttl
	case pttl == -2:
		return -1
	}
	return 0
}

// rangeOf is ZRANGE WITHSCORES's reply as member, score, member…: flat in
// RESP2, pairs with a double in RESP3 (formatted here to parse back to the
// same score).
func rangeOf(v any) ([]string, error) {
	elems, _ := v.([]any)
	out := make([]string, 0, 2*len(elems))
	for _, e := range elems {
		switch e := e.(type) {
		case string:
			out = append(out, e)
		case []any:
			if len(e) != 2 {
				return nil, fmt.Errorf("member %v", e)
			}
			member, ok := e[0].(string)
			score, ok2 := e[1].(float64)
			if !ok || !ok2 {
				return nil, fmt.Errorf("member %v", e)
			}
			out = append(out, member, strconv.FormatFloat(score, 'g', -1, 64))
		default:
			return nil, fmt.Errorf("member %T", e)
		}
	}
	return out, nil
}

// stringsOf is a reply's array of strings.
func stringsOf(v any) ([]string, error) {
	elems, _ := v.([]any)
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("element %T", e)
		}
		out = append(out, s)
	}
	return out, nil
}

// evaluated holds the scripts known to be in a server's cache, by its
// address and the script's SHA1.
var evaluated sync.Map

// run runs s on c: by its body the first time on that server, by its
// SHA1 after. Script.Run alone tries EVALSHA first, and the NOSCRIPT error
// that answers it lands in the operator's error statistics.
func run(ctx context.Context, c *redis.Client, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	key := c.Options().Addr + " " + s.Hash()
	if _, ok := evaluated.Load(key); ok {
		return s.Run(ctx, c, keys, args...)
	}
	cmd := s.Eval(ctx, c, keys, args...)
	if err := cmd.Err(); err == nil || err == redis.Nil {
		evaluated.Store(key, true)
	}
	return cmd
}
