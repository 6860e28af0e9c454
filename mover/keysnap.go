package mover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/chunk"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/throttle"
)

// keyLister makes the snapshot of the keys path: the link continues the
// source's history from a point (no fork, no RDB), then the lister lists
// the chosen slots a group at a time and reads their keys in batches (of
// one slot before 7.0), big keys in chunks, each call marked in the stream
// (see package slotread) and entered in the ledger of reads, while the
// feeder applies the stream: a slot's commands are skipped until its
// listing's marker (the listing holds their effect), a listed key's until
// its batch's marker, where the feeder puts the copies on the target.
type keyLister struct {
	source     *redis.Client
	reads      *reads
	gate       *throttle.Gate // holds the reads on the source (the applier's writes hold on it too)
	log        *slog.Logger
	chunkLimit chunk.Limit

	groups    [][]uint16 // slots not listed yet, a listing call each
	queue     []listed   // listed keys not read yet
	bigQueue  []*bigRead // big keys with a chunk to read
	big       map[string]*bigRead
	known     *keySet // keys the preflight's survey found not big
	held      []bool  // by slot: listing not yet passed in the stream
	lim       slotread.Limits
	fieldTTLs bool // the source has hash-field expiries (7.4+)
}

// bigRead is a big hash, set or sorted set read in chunks, by a scan of
// its elements, each chunk marked in the stream like a batch. From the
// first chunk's marker on, the stream's commands on the key are applied to
// the part the target has: they name their elements, and a later chunk
// brings each element as the source has it at that chunk's marker, so the
// key ends whole (a scan returns every element present from its start to
// its end; one added meanwhile is added by the stream). The TTL is set at
// the last chunk's marker. A command that depends on the elements' order or
// on the whole key (ZPOPMIN, a multi-key write) starts the read over.
//
// A sorted set is read in its order instead, by rank (see
// slotread.ReadRange), which costs the source and the target less; the
// target then holds every member up to the last one read, as the source
// has it. A member that a write moves there from further on, by its old
// score (ZINCRBY, ZADD XX or INCR), or a change of the set before the
// last member read between two chunks (the next chunk's ranks moved)
// starts the read over in the scan's order, which neither disturbs.
type bigRead struct {
	key, typ string
	slot     uint16
	cursor   string   // the scan's cursor, or the next rank in order
	ordered  bool     // a sorted set read in its order
	last     []string // in order: the last member read and its score
	gen      int      // bumped by a restart: chunks of older ones are ignored
	started  bool     // a chunk's marker of this generation has passed
	restarts int
	queued   bool // waiting for its next chunk to be read
	pace     *chunk.Pacer
}

// chunkCopy is one chunk, waiting for its marker.
type chunkCopy struct {
	big   *bigRead
	gen   int
	first bool
	slotread.Chunk
}

// maxRestarts bounds the restarts of a big key's read: one that the
// application keeps changing by position cannot be read in chunks.
const maxRestarts = 5

// listed is the keys of one slot a listing found, not read yet.
type listed struct {
	slot uint16
	keys []string
}

// Bounds of the keys path's calls on the source: each call must hold its
// main thread for about a millisecond at most.
const (
	listKeysPerCall  = 10_000 // keys a listing call may return: a slot is listed in one call, so no bigger slot takes this path
	listKeysPerGroup = 1_000  // keys of the slots grouped into one listing call (~1.3 ms on a 2-core VM; 10,000 held the source for 11-20 ms)
	readKeysPerCall  = 512    // keys a batch names
	readBudget       = 2_000  // elements (or 64-byte units of strings) a batch reads
	readsAhead       = 8      // calls made before their marker came through the stream
)

func newKeyLister(plan snapshotPlan, opts *Options, source *redis.Client, rs *reads, gate *throttle.Gate, log *slog.Logger) *keyLister {
	ks := &keyLister{source: source, reads: rs, gate: gate, log: log, chunkLimit: opts.chunkLimit(),
		groups: plan.groups, known: plan.known, held: make([]bool, slots.Count), big: map[string]*bigRead{},
		lim: slotread.Limits{Budget: readBudget, Big: int64(opts.BigKeyElements), AnySlot: plan.anySlot}, fieldTTLs: plan.fieldTTLs}
	for _, g := range plan.groups {
		for _, s := range g {
			ks.held[s] = true
		}
	}
	return ks
}

// ErrBigKey stops a keys-path snapshot that meets a key too big to read in
// one short call.
var ErrBigKey = errors.New("too big to read from the source in one short call")

// readKeys makes the keys path's snapshot, applying the stream from r as
// it goes, and returns once the target has acknowledged every copy.
func (f *feeder) readKeys(ctx context.Context, r *stream.CommandReader) error {
	ks := f.keys
	var end int64
	for {
		for f.reads.inFlight() < readsAhead && ks.toRead() {
			if err := ks.next(ctx); err != nil {
				return err
			}
		}
		if f.reads.inFlight() == 0 && !ks.toRead() {
			break
		}
		var err error
		if end, err = f.applyNext(ctx, r); err != nil {
			return err
		}
	}
	return f.app.Wait(ctx, end)
}

// next makes the next call on the source, once the gate lets it: a big
// key's chunk, a batch of listed keys, or a listing.
func (ks *keyLister) next(ctx context.Context) error {
	if err := cmp.Or(ctx.Err(), ks.gate.Wait(ctx)); err != nil {
		return err
	}
	switch {
	case len(ks.bigQueue) > 0:
		return ks.readChunk(ctx)
	case len(ks.queue) > 0:
		return ks.readNext(ctx)
	default:
		return ks.listNext(ctx)
	}
}

// listNext lists the next group of slots; a group that has grown past what
// one call may list is split in two.
func (ks *keyLister) listNext(ctx context.Context) error {
	group := ks.groups[0]
	r := ks.reads.marked(group[0])
	var lists [][]string
	err := cluster.WhileDown(ctx, func() (err error) {
		lists, err = slotread.List(ctx, ks.source, group, string(r.marker), r.nonce(), listKeysPerCall)
		return err
	})
	if err != nil {
		ks.reads.drop(r)
		var tooMany *slotread.TooManyKeys
		if errors.As(err, &tooMany) && len(group) > 1 {
			half := len(group) / 2
			ks.groups = append([][]uint16{group[:half], group[half:]}, ks.groups[1:]...)
			return nil
		}
		return fmt.Errorf("list slot %d…: %w", group[0], err)
	}
	ks.groups = ks.groups[1:]
	r.listed = group
	for i, keys := range lists {
		if len(keys) == 0 {
			continue
		}
		ks.reads.await(keys...)
		ks.queue = append(ks.queue, listed{slot: group[i], keys: keys})
	}
	return nil
}

// readNext reads the next listed keys: those the preflight's survey found
// small by readSmall, any other (made since) by a script that sizes each
// key before it reads it.
func (ks *keyLister) readNext(ctx context.Context) error {
	if _, small := ks.known.units(ks.queue[0].keys[0]); small {
		return ks.readSmall(ctx)
	}
	return ks.readUnsized(ctx)
}

// readSmall reads surveyed keys from the head of the queue, about a
// script call's worth (readKeysPerCall keys, readBudget units), in
// transactions of a slot each, all in one round trip.
func (ks *keyLister) readSmall(ctx context.Context) error {
	var slotOf []uint16
	var batches [][]string
	keys, used := 0, int64(0)
queue:
	for _, l := range ks.queue {
		n := 0
		for _, k := range l.keys {
			u, small := ks.known.units(k)
			if !small || keys == readKeysPerCall || (keys > 0 && used+u+1 > readBudget) {
				if n > 0 {
					slotOf, batches = append(slotOf, l.slot), append(batches, l.keys[:n])
				}
				break queue
			}
			n, keys, used = n+1, keys+1, used+u+1
		}
		slotOf, batches = append(slotOf, l.slot), append(batches, l.keys)
	}
	ran, err := ks.readBatches(ctx, slotOf, batches)
	for i := range ran {
		ks.queue[i].keys = ks.queue[i].keys[len(batches[i]):]
	}
	ks.queue = slices.DeleteFunc(ks.queue, func(l listed) bool { return len(l.keys) == 0 })
	if err != nil {
		return fmt.Errorf("read keys of slot %d…: %w", slotOf[0], err)
	}
	return nil
}

// readUnsized reads keys the survey did not see from the head of the
// queue, in one script call that sizes each (reporting big ones, to be
// read in chunks) until its budget is spent: of one slot, or of several
// if the source lets a script read them (ks.lim.AnySlot).
func (ks *keyLister) readUnsized(ctx context.Context) error {
	var batch []string
	var slotOf []uint16
queue:
	for _, l := range ks.queue {
		for _, k := range l.keys {
			if _, small := ks.known.units(k); small || len(batch) == readKeysPerCall {
				break queue
			}
			batch = append(batch, k)
			slotOf = append(slotOf, l.slot)
		}
		if !ks.lim.AnySlot {
			break
		}
	}
	got, err := ks.read(ctx, slotOf[0], batch)
	if err != nil {
		return fmt.Errorf("read keys of slot %d…: %w", slotOf[0], err)
	}
	for i, k := range got {
		if !k.Big {
			continue
		}
		if !slices.Contains(slotread.ScanTypes, k.Type) {
			return fmt.Errorf("key %q of slot %d, a %s of %d elements, is %w: move these slots with the RDB snapshot", k.Name, slotOf[i], k.Type, k.Units, ErrBigKey)
		}
		b := &bigRead{key: k.Name, typ: k.Type, slot: slotOf[i], cursor: "0", queued: true, ordered: k.Type == "zset"}
		b.pace = b.newPacer(ks.chunkLimit)
		ks.big[k.Name] = b
		ks.bigQueue = append(ks.bigQueue, b)
	}
	for n := len(got); n > 0; {
		head := &ks.queue[0]
		took := min(n, len(head.keys))
		head.keys = head.keys[took:]
		n -= took
		if len(head.keys) == 0 {
			ks.queue = ks.queue[1:]
		}
	}
	return nil
}

func (ks *keyLister) toRead() bool {
	return len(ks.bigQueue) > 0 || len(ks.queue) > 0 || len(ks.groups) > 0
}

// readChunk reads the next chunk of the first big key in the queue.
func (ks *keyLister) readChunk(ctx context.Context) error {
	b := ks.bigQueue[0]
	r := ks.reads.marked(b.slot)
	var ch slotread.Chunk
	err := cluster.WhileDown(ctx, func() (err error) {
		if b.ordered {
			rank, _ := strconv.ParseInt(b.cursor, 10, 64)
			ch, err = slotread.ReadRange(ctx, ks.source, b.key, rank, b.last, b.pace.Count(), string(r.marker), r.nonce())
			if !isNoPerm(err) || b.cursor != "0" {
				return err
			}
			// A user granted what the scans need, before sorted sets
			// were read in order: the refused transaction ran nothing.
			ks.log.Info("the source's user may not run ZRANGE: big sorted sets are read by ZSCAN", "key", b.key)
			b.readByScan(ks.chunkLimit)
		}
		ch, err = slotread.ReadChunk(ctx, ks.source, b.key, b.typ, b.cursor, b.pace.Count(), string(r.marker), r.nonce(), ks.fieldTTLs)
		return err
	})
	if err != nil {
		ks.reads.drop(r)
		return err
	}
	size := 0
	for _, e := range ch.Elements {
		size += len(e)
	}
	b.pace.Observe(len(ch.Elements)/elementStrings(b.typ), size)
	r.chunk = &chunkCopy{big: b, gen: b.gen, first: b.cursor == "0", Chunk: ch}
	b.cursor = ch.Cursor
	if n := len(ch.Elements); b.ordered && n >= 2 {
		b.last = ch.Elements[n-2:]
	}
	if ch.Cursor == "0" || ch.Type != b.typ || ch.Moved { // a moved set's read starts over at the chunk's marker
		ks.bigQueue = ks.bigQueue[1:]
		b.queued = false
	}
	return nil
}

// applyChunk puts a chunk on the target at its marker.
func (f *feeder) applyChunk(c *chunkCopy) error {
	b := c.big
	if c.gen != b.gen {
		return nil // a restart reads the key again
	}
	if c.Moved {
		return f.restart(b, "a change before the last member read in order")
	}
	key := []byte(b.key)
	label := "chunk of " + strconv.Quote(b.key)
	send := func(args ...[]byte) error { return f.send(label, args...) }
	if c.first {
		// From here on the stream's commands on the key apply.
		b.started = true
		f.reads.release(b.key)
		if err := send([]byte("DEL"), key); err != nil {
			return err
		}
	}
	switch {
	case c.Type == "none": // gone: the stream's DEL may sit in this very marker block
		return f.endBig(b, send([]byte("DEL"), key))
	case c.Type != b.typ: // deleted and made anew: the stream holds all of it
		return f.endBig(b, nil)
	}
	if err := f.sendElements(b, c); err != nil {
		return err
	}
	if h := f.opts.Hooks.BigKeyStarted; h != nil && c.first {
		h(b.key)
	}
	if c.Cursor != "0" {
		return nil
	}
	f.stats.keys.Add(1)
	f.stats.bigKeys.Add(1)
	var err error
	if c.ExpireAt > 0 {
		err = send([]byte("PEXPIREAT"), key, strconv.AppendInt(nil, c.ExpireAt, 10))
	} else {
		err = send([]byte("PERSIST"), key)
	}
	f.expiring.track(key, c.ExpireAt)
	return f.endBig(b, err)
}

// elementStrings is the strings per element in a scan's reply of typ.
func elementStrings(typ string) int {
	if typ == "set" {
		return 1
	}
	return 2
}

// addCommand is the command that adds elements of typ.
var addCommand = map[string]string{"hash": "HSET", "set": "SADD", "zset": "ZADD"}

// sendElements adds a chunk's elements to the key on the target, in
// commands within opts' chunk limit.
func (f *feeder) sendElements(b *bigRead, c *chunkCopy) error {
	key := []byte(b.key)
	label := "chunk of " + strconv.Quote(b.key)
	per, cmd := elementStrings(b.typ), addCommand[b.typ]
	size := func(i int) int {
		n := 0
		for _, s := range c.Elements[i*per : (i+1)*per] {
			n += len(s)
		}
		return n
	}
	for i, end := range f.opts.chunkLimit().Split(cmd, len(c.Elements)/per, size) {
		args := [][]byte{[]byte(cmd), key}
		for j := i; j < end; j++ {
			e := c.Elements[j*per : (j+1)*per]
			if b.typ == "zset" {
				e = []string{e[1], e[0]} // ZSCAN gives member, score; ZADD takes score, member
			}
			for _, s := range e {
				args = append(args, []byte(s))
				f.stats.bytes.Add(int64(len(s)))
			}
		}
		if err := f.send(label, args...); err != nil {
			return err
		}
	}
	for j, at := range c.FieldExpireAt {
		if at > 0 && j*2 < len(c.Elements) {
			err := f.send(label, []byte("HPEXPIREAT"), key, strconv.AppendInt(nil, at, 10), []byte("FIELDS"), []byte("1"), []byte(c.Elements[j*2]))
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *feeder) endBig(b *bigRead, err error) error {
	delete(f.keys.big, b.key)
	return err
}

// chunked returns the big key being read in chunks whose commands now
// apply to the target (its read has started), or nil.
func (ks *keyLister) chunked(key []byte) *bigRead {
	if ks == nil || len(ks.big) == 0 {
		return nil
	}
	if b := ks.big[string(key)]; b != nil && b.started {
		return b
	}
	return nil
}

// restart reads a big key again from its start, because of cause: the
// stream's commands on it wait for the new first chunk, and what the
// target has is dropped.
func (f *feeder) restart(b *bigRead, cause string) error {
	if b.restarts++; b.restarts > maxRestarts {
		return fmt.Errorf("big %s %q changed by position or with other keys %d times while it was read in chunks: move these slots with the RDB snapshot", b.typ, b.key, b.restarts)
	}
	f.log.Info("a big key read in chunks is read again from its start", "key", b.key, "cause", cause, "restarts", b.restarts)
	f.stats.resynced.Add(1)
	b.gen++
	b.started = false
	b.cursor = "0"
	if b.ordered {
		b.readByScan(f.keys.chunkLimit)
	}
	f.reads.await(b.key)
	if !b.queued {
		b.queued = true
		f.keys.bigQueue = append(f.keys.bigQueue, b)
	}
	return f.send("restart of "+strconv.Quote(b.key), []byte("DEL"), []byte(b.key))
}

// readByScan makes b read by its type's scan from its start on.
func (b *bigRead) readByScan(lim chunk.Limit) {
	b.ordered, b.last = false, nil
	b.pace = b.newPacer(lim)
}

// newPacer paces b's reads: by rank in order, else by its type's scan.
func (b *bigRead) newPacer(lim chunk.Limit) *chunk.Pacer {
	if b.ordered {
		return chunk.NewPacer(lim, "ZRANGE")
	}
	return chunk.NewPacer(lim, slotread.ScanCommand[b.typ])
}

// relative says whether a write on a sorted set (name, upper case) sets a
// member's score from the one it had, or only if it had one (ZINCRBY, ZADD
// with INCR or XX): on a target that lacks the member yet, it does
// something else.
func relative(name string, args [][]byte) bool {
	switch name {
	case "ZINCRBY":
		return true
	case "ZADD":
		for _, a := range args[min(2, len(args)):] {
			switch strings.ToUpper(string(a)) {
			case "XX", "INCR":
				return true
			case "NX", "GT", "LT", "CH":
			default:
				return false // the scores and members
			}
		}
	}
	return false
}

// positional says whether a command on a sorted set depends on its
// elements' order, which a part of the set does not have.
func positional(name string) bool {
	switch name {
	case "ZREMRANGEBYRANK", "ZPOPMIN", "ZPOPMAX", "ZMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP":
		return true
	}
	return false
}

// keySet holds key names with their size in units (elements, or 64-byte
// units of a string), kept by a hash of each name (a collision reads a key
// with the size of another: a batch a little over its budget).
type keySet struct {
	seed maphash.Seed
	m    map[uint64]int64
}

func newKeySet() *keySet { return &keySet{seed: maphash.MakeSeed(), m: map[uint64]int64{}} }

func (s *keySet) add(key string, units int64) { s.m[maphash.String(s.seed, key)] = units }

// units reports the size of key, and whether the set has it.
func (s *keySet) units(key string) (int64, bool) {
	if s == nil {
		return 0, false
	}
	u, ok := s.m[maphash.String(s.seed, key)]
	return u, ok
}

// read reads keys of slot on the source (as far as ks.lim lets one call
// go) and defers them to the read's marker.
func (ks *keyLister) read(ctx context.Context, slot uint16, keys []string) ([]slotread.Key, error) {
	r := ks.reads.marked(slot)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A refused call wrote no marker: it can be made again.
	var got []slotread.Key
	err := cluster.WhileDown(ctx, func() (err error) {
		got, err = slotread.Read(ctx, ks.source, keys, string(r.marker), r.nonce(), ks.lim)
		return err
	})
	if err != nil {
		ks.reads.drop(r)
		return nil, err
	}
	r.keys = got
	ks.reads.deferTo(r)
	return got, nil
}

// readBatches reads batches of keys, each of one slot, in transactions
// (slotread.ReadTx) made in one round trip, and defers each batch's keys to
// its marker. It returns how many batches ran, the first ones: the others'
// keys were not read (a node down for a moment refused them), and are to be
// read again.
func (ks *keyLister) readBatches(ctx context.Context, slotOf []uint16, batches [][]string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	marked := make([]*pendingRead, len(batches))
	txs := make([]slotread.Batch, len(batches))
	for i, keys := range batches {
		marked[i] = ks.reads.marked(slotOf[i])
		txs[i] = slotread.Batch{Keys: keys, Marker: string(marked[i].marker), Nonce: marked[i].nonce()}
	}
	var got [][]slotread.Key
	var rest error // why the batches after those that ran did not
	err := cluster.WhileDown(ctx, func() (err error) {
		// Only a call of which no batch ran may be made again as it is.
		if got, err = slotread.ReadTx(ctx, ks.source, txs); len(got) > 0 {
			rest, err = err, nil
		}
		return err
	})
	for i, r := range marked {
		if i >= len(got) {
			ks.reads.drop(r)
			continue
		}
		r.keys = got[i]
		ks.reads.deferTo(r)
	}
	if err == nil && rest != nil && !cluster.IsDown(rest) {
		err = rest
	}
	return len(got), err
}
