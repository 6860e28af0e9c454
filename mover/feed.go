package mover

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/apply"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/rdbparse"
	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/throttle"
)

// feeder moves data from the replica link to the target: the snapshot's keys
// of the chosen slots, then the command stream filtered to them, in order,
// on one pipelined connection.
type feeder struct {
	opts     *Options // the move's: its slots, task ID, chunking
	log      *slog.Logger
	sourceID string
	stats    *copyStats   // what the task reports
	clock    *sourceClock // the source's clock, for relative TTLs

	link          *stream.Link
	app           *apply.Applier
	keyTable      *stream.KeyTable
	targetVersion int

	source        *redis.Client // for resyncs
	target        *redis.Client // for its commandstats
	args          [][]byte      // reused argument list
	ttlBuf        []byte
	valueBuf      []byte // room for a string value stored as an integer
	bigSeq        int
	readSeq       uint64
	deferred      map[string]uint64       // key → the read that will bring it (awaitingRead: one not made yet)
	pending       map[string]*pendingRead // reads whose marker has not come, by nonce
	positioned    []*pendingRead          // resyncs read at an offset the stream has not reached, in its order
	deferredCount atomic.Int64            // len(deferred), for the cutover's fence
	keys          *keySnapshot            // the keys path's snapshot; nil for the RDB's
	frozenAt      atomic.Int64            // 1 + the stream offset past which nothing is applied; 0 until the cutover
	warnedSplit   bool
	expiring      *expiring      // keys that may expire on the target before a command on them arrives
	gate          *throttle.Gate // holds the keys path's reads on the source (the applier's writes hold on it too)
}

// freeze stops applying the stream at and past off, and freeze(-1) lifts
// that: see cutover.Release.
func (f *feeder) freeze(off int64) { f.frozenAt.Store(off + 1) }

var (
	argAsking        = []byte("ASKING")
	argRestoreAsking = []byte("RESTORE-ASKING")
	argReplace       = []byte("REPLACE")
	argAbsTTL        = []byte("ABSTTL")
	argSet           = []byte("SET")
	argPXAT          = []byte("PXAT")
	argClient        = []byte("CLIENT")
	argReply         = []byte("REPLY")
	argOn            = []byte("ON")
	argOff           = []byte("OFF")
)

// run applies the snapshot (the RDB's, or the keys path's, which applies
// the stream as it goes), closes snapDone once the target has acknowledged
// all of it, then applies the command stream until it fails or ctx ends.
func (f *feeder) run(ctx context.Context, snapDone chan<- struct{}) error {
	if err := apply.GuardScript.Load(ctx, f.target).Err(); err != nil {
		return fmt.Errorf("load the expiry guard on the target: %w", err)
	}
	if f.keys == nil {
		if err := f.snapshot(ctx); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		close(snapDone)
	}

	r := f.link.Commands(f.keyTable)
	if f.keys != nil {
		if err := f.readKeys(ctx, r); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		close(snapDone)
	}
	for {
		if _, err := f.applyNext(ctx, r); err != nil {
			return err
		}
	}
}

// applyNext applies the next command of the stream and returns its end.
func (f *feeder) applyNext(ctx context.Context, r *stream.CommandReader) (int64, error) {
	cmd, err := r.Next()
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("replication stream: %w", err)
	}
	return cmd.End, f.applyDelta(ctx, cmd)
}

// snapshot copies the chosen keys of the RDB to the target and returns once
// the target has them all.
//
// The commands go with the target's replies turned off (CLIENT REPLY OFF),
// which makes its ingest about a fifth faster; their outcome is proved from
// the target's error counts instead (see verifyQuiet).
func (f *feeder) snapshot(ctx context.Context) error {
	quiet := !f.opts.ReplyPerKey
	var before errorCounts
	if quiet {
		var err error
		if before, err = readErrorCounts(ctx, f.target); err != nil {
			return err
		}
		if err := f.replies(false); err != nil {
			return err
		}
	}
	// A key that expired before its turn is not copied, but the stream
	// may still hold writes the source made to it in time: guard it.
	sc := rdbparse.NewScanner(bufio.NewReaderSize(f.link.RDB(), 1<<20), f.opts.Slots, rdbparse.OnExpired(f.expiring.track))
	for {
		e, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := f.copyEntry(e, sc.Version(), quiet); err != nil {
			return err
		}
	}
	if quiet {
		if err := f.replies(true); err != nil {
			return err
		}
	}
	f.app.Mark(f.link.Offset)
	if err := f.app.Wait(ctx, f.link.Offset); err != nil {
		return err
	}
	if !quiet {
		return nil
	}
	after, err := readErrorCounts(ctx, f.target)
	if err != nil {
		return err
	}
	others, err := verifyQuiet(before, after, func() (bool, error) {
		return importingFrom(ctx, f.target, f.opts.Slots, f.sourceID)
	})
	if others > 0 {
		f.log.Info("other clients' SETs or RESTOREs were refused on the target during the snapshot; the slots stayed importing and every error was a redirection, so none was the move's", "refused", others)
	}
	return err
}

// replies turns the target's replies on or off. ON is answered, so once
// its reply is in, every command before it has run.
func (f *feeder) replies(on bool) error {
	if on {
		return f.app.Send(0, "CLIENT REPLY ON", argClient, argReply, argOn)
	}
	return f.app.SendQuiet(argClient, argReply, argOff)
}

// copyEntry copies one key to the target: a string with SET, anything else
// with RESTORE-ASKING and the source's own payload, or, for a big
// collection or a target too old for the payload's RDB version, as chunked
// commands.
func (f *feeder) copyEntry(e *rdbparse.Entry, version int, quiet bool) error {
	f.expiring.track(e.Key, e.ExpireAt)
	f.stats.keys.Add(1)
	f.stats.bytes.Add(int64(len(e.Payload)))
	if e.Type == rdbparse.TypeString {
		return f.setString(e, quiet)
	}
	if e.Elements >= f.opts.BigKeyElements || version > f.targetVersion {
		// Replayed commands are checked by their replies.
		if quiet {
			if err := f.replies(true); err != nil {
				return err
			}
			defer f.replies(false)
		}
		return f.replay(e, version)
	}
	f.ttlBuf = strconv.AppendInt(f.ttlBuf[:0], e.ExpireAt, 10)
	f.args = append(f.args[:0], argRestoreAsking, e.Key, f.ttlBuf, e.Payload, argReplace, argAbsTTL)
	if quiet {
		return f.app.SendQuiet(f.args...)
	}
	return f.app.Send(0, "RESTORE "+string(e.Key), f.args...)
}

// setString copies a string with ASKING + SET: the target keeps the value
// it is given, where RESTORE costs it a checksum and a copy more (with 512-byte
// values its ingest was 25% faster), and a string needs no RDB version.
func (f *feeder) setString(e *rdbparse.Entry, quiet bool) error {
	v, err := e.StringValue(f.valueBuf[:0])
	if err != nil {
		return err
	}
	f.args = append(f.args[:0], argSet, e.Key, v)
	if e.ExpireAt > 0 {
		f.ttlBuf = strconv.AppendInt(f.ttlBuf[:0], e.ExpireAt, 10)
		f.args = append(f.args, argPXAT, f.ttlBuf)
	}
	if !quiet {
		return f.send("SET "+string(e.Key), f.args...)
	}
	if err := f.app.SendQuiet(argAsking); err != nil {
		return err
	}
	return f.app.SendQuiet(f.args...)
}

// replay rebuilds a key from its decoded elements under a temporary key of
// the same slot, then renames it into place, so that a failure never leaves
// half a key under the real name. Its TTL is set last.
func (f *feeder) replay(e *rdbparse.Entry, version int) error {
	obj, err := rdbparse.Decode(e, version)
	if err != nil {
		return fmt.Errorf("decode %q for replay: %w", e.Key, err)
	}
	f.stats.bigKeys.Add(1)
	f.bigSeq++
	tmp := []byte(tempKey(e.Slot, f.opts.TaskID, f.bigSeq))
	label := "replay of " + strconv.Quote(string(e.Key))
	send := func(args ...[]byte) error { return f.send(label, args...) }
	if err := send([]byte("DEL"), tmp); err != nil {
		return err
	}
	for args := range obj.Commands(tmp, f.opts.chunkLimit()) {
		if err := send(args...); err != nil {
			return err
		}
	}
	// On an importing slot a two-key command needs both keys to exist.
	if err := send(argSet, e.Key, []byte("placeholder")); err != nil {
		return err
	}
	if err := send([]byte("RENAME"), tmp, e.Key); err != nil {
		return err
	}
	if e.ExpireAt > 0 {
		return send([]byte("PEXPIREAT"), e.Key, []byte(strconv.FormatInt(e.ExpireAt, 10)))
	}
	return nil
}

// applyDelta applies one command or MULTI block of the stream to the
// target, as far as it touches the chosen slots, and marks its bytes as done.
//
// On the target the slots are IMPORTING, where a command naming several
// keys is refused with TRYAGAIN unless every one of them exists. So blocks
// are applied command by command (no client can see the slots on the target
// before the cutover, so nothing observes the steps between), multi-key
// DEL, UNLINK, MSET and MSETNX are split per key, and the keys of any other
// multi-key write are resynced from the source (see resync).
func (f *feeder) applyDelta(ctx context.Context, cmd *stream.Command) error {
	if err := f.applyCommand(ctx, cmd); err != nil {
		return err
	}
	// Resyncs read at this point hold the keys as they are here: they go
	// before the mark, so that the target reaching it means it has them.
	if err := f.finishPositioned(cmd.End); err != nil {
		return err
	}
	f.app.Mark(cmd.End)
	return nil
}

func (f *feeder) applyCommand(ctx context.Context, cmd *stream.Command) error {
	if at := f.frozenAt.Load(); at > 0 && cmd.Start >= at-1 {
		return nil
	}
	for _, k := range f.app.TakeGone() {
		if f.deferred[string(k)] == 0 {
			if err := f.resync(ctx, [][]byte{k}); err != nil {
				return err
			}
		}
	}
	if r := f.readOf(cmd); r != nil {
		return f.finishRead(r)
	}
	units := []stream.Command{*cmd}
	if cmd.Tx != nil {
		units = cmd.Tx
		f.warnSplit(cmd)
	}
	for i := range units {
		if err := f.check(&units[i]); err != nil {
			return err
		}
	}
	for i := range units {
		if err := f.applyOne(ctx, &units[i]); err != nil {
			return err
		}
	}
	return nil
}

// warnSplit logs, once per move, a transaction (or a script with
// allow-cross-slot-keys) that writes both moving slots and others: the
// target gets only its part, and the two parts end up on different nodes.
func (f *feeder) warnSplit(cmd *stream.Command) {
	if f.warnedSplit {
		return
	}
	in, out := false, false
	for _, u := range cmd.Tx {
		if u.Class == stream.ClassKeyed {
			in = in || f.opts.Slots.Contains(u.Slot)
			out = out || !f.opts.Slots.Contains(u.Slot)
		}
	}
	if in && out {
		f.warnedSplit = true
		f.log.Warn("a transaction or cross-slot script wrote the moving slots and others at once: after the move its parts are on different nodes (logged once)", "offset", cmd.Start)
	}
}

// check refuses what the move cannot carry through (refusal), and logs
// a keyless write, which is not applied.
func (f *feeder) check(u *stream.Command) error {
	if err := refusal(u, feederView{f: f}); err != nil {
		return err
	}
	if u.Class == stream.ClassKeyless {
		f.log.Warn("keyless write on the source not applied to the target", "command", u.Name(), "offset", u.Start)
	}
	return nil
}

// applyOne plays one command of the stream on the target, as playsOf says.
func (f *feeder) applyOne(ctx context.Context, u *stream.Command) error {
	v := feederView{f: f, now: time.Now().UnixMilli()}
	if !isDelta(u, v) {
		return nil
	}
	f.stats.delta.Add(1)
	if h := f.opts.Hooks.Delta; h != nil && !h(u) {
		return nil
	}
	for _, p := range playsOf(u, v) {
		if err := f.play(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// play runs one play on the target, and keeps what it changes of what
// the player knows.
func (f *feeder) play(ctx context.Context, p play) error {
	switch p.kind {
	case playSend:
		return f.send(p.name, p.args...)
	case playSendGuarded:
		if err := f.app.Send(0, p.name, argAsking); err != nil {
			return err
		}
		return f.app.SendGuarded(p.name, p.key, p.args...)
	case playForget:
		f.expiring.forget(p.key)
	case playTrack:
		f.expiring.track(p.key, p.at)
	case playRestart:
		return f.restart(f.keys.chunked(p.key), p.name)
	case playResync:
		return f.resync(ctx, p.keys)
	}
	return nil
}

// feederView is what the feeder knows, as the player reads it, at now
// (Unix ms).
type feederView struct {
	f   *feeder
	now int64
}

func (v feederView) moving(slot uint16) bool      { return v.f.opts.Slots.Contains(slot) }
func (v feederView) listedLater(slot uint16) bool { return v.f.keys != nil && v.f.keys.held[slot] }
func (v feederView) deferred(key []byte) bool     { return v.f.deferred[string(key)] != 0 }
func (v feederView) chunked(key []byte) bool      { return v.f.keys.chunked(key) != nil }
func (v feederView) inOrder(key []byte) bool {
	b := v.f.keys.chunked(key)
	return b != nil && b.ordered
}
func (v feederView) guarded(key []byte) bool    { return v.f.expiring.guarded(key, v.now) }
func (v feederView) sourceTime(end int64) int64 { return v.f.clock.at(end) }

// send writes one command behind ASKING; label names it in errors.
func (f *feeder) send(label string, args ...[]byte) error {
	if err := f.app.Send(0, label, argAsking); err != nil {
		return err
	}
	return f.app.Send(0, label, args...)
}

func distinctKeys(u *stream.Command) [][]byte {
	var out [][]byte
	for _, k := range u.Keys {
		if !slices.ContainsFunc(out, func(b []byte) bool { return bytes.Equal(b, u.Args[k]) }) {
			out = append(out, u.Args[k])
		}
	}
	return out
}

// pendingRead is a read on the source whose place in the stream is
// exactly the moment the read shows: a copy of some keys, or a listing of
// slots for the keys path's snapshot, made in one call with a marker
// write (see package slotread); or a resync, read at an offset.
type pendingRead struct {
	id       uint64
	marker   []byte
	at       int64          // a resync's offset (slotread.ReadAt)
	keys     []slotread.Key // the copies, restored at the marker
	listed   []uint16       // a listing's slots, held until the marker
	chunk    *chunkCopy     // a chunk of a big key
	snapshot bool           // part of the keys path's snapshot
}

// awaitingRead marks a listed key whose read is not made yet.
const awaitingRead = math.MaxUint64

// resync handles a multi-key write the target would refuse: its keys are
// read again on the source in one transaction that also answers the
// source's replication offset, and every command on them is skipped until
// the stream reaches that offset, where the copies are RESTOREd: the state
// the keys have there. The read writes nothing, so a write pause does not
// hold it up: a resync of the last writes before a cutover's fence is read
// during the pause, at the fence, where a marker's write would wait for
// the pause to end and the fence would be missed.
func (f *feeder) resync(ctx context.Context, keys [][]byte) error {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = string(k)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Whole, whatever their size (as a replica would have them): DUMP and
	// PTTL only, not sized first.
	var got []slotread.Key
	var at int64
	err := cluster.WhileDown(ctx, func() (err error) {
		got, at, err = slotread.ReadAt(ctx, f.source, names)
		return err
	})
	if err != nil {
		return fmt.Errorf("resync of %d keys from the source: %w", len(keys), err)
	}
	f.readSeq++
	r := &pendingRead{id: f.readSeq, at: at, keys: got}
	f.deferTo(r)
	f.positioned = append(f.positioned, r)
	f.stats.resynced.Add(int64(len(keys)))
	return nil
}

// finishPositioned restores the resyncs read at or before offset end, once
// the stream has been applied through end. A resync read past the point
// where the stream was frozen shows the source after it let go of the
// slots (orphans it expired since): it must not reach the target.
func (f *feeder) finishPositioned(end int64) error {
	for len(f.positioned) > 0 && f.positioned[0].at <= end {
		r := f.positioned[0]
		if fz := f.frozenAt.Load(); fz > 0 && r.at > fz-1 {
			return fmt.Errorf("a resync of %d keys was read at offset %d, after the source released the slots at %d", len(r.keys), r.at, fz-1)
		}
		f.positioned = f.positioned[1:]
		if err := f.finishRead(r); err != nil {
			return err
		}
	}
	return nil
}

// read reads keys of slot on the source (as far as lim lets one call go)
// and defers them to the read's marker.
func (f *feeder) read(ctx context.Context, slot uint16, keys []string, lim slotread.Limits) ([]slotread.Key, error) {
	r := f.newRead(slot)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A refused call wrote no marker: it can be made again.
	var got []slotread.Key
	err := cluster.WhileDown(ctx, func() (err error) {
		got, err = slotread.Read(ctx, f.source, keys, string(r.marker), f.nonce(r), lim)
		return err
	})
	if err != nil {
		f.dropRead(r)
		return nil, err
	}
	r.keys = got
	f.deferTo(r)
	return got, nil
}

// readBatches reads batches of keys, each of one slot, in transactions
// (slotread.ReadTx) made in one round trip, and defers each batch's keys to
// its marker. It returns how many batches ran, the first ones: the others'
// keys were not read (a node down for a moment refused them), and are to be
// read again.
func (f *feeder) readBatches(ctx context.Context, slotOf []uint16, batches [][]string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reads := make([]*pendingRead, len(batches))
	txs := make([]slotread.Batch, len(batches))
	for i, keys := range batches {
		reads[i] = f.newRead(slotOf[i])
		txs[i] = slotread.Batch{Keys: keys, Marker: string(reads[i].marker), Nonce: f.nonce(reads[i])}
	}
	var got [][]slotread.Key
	var rest error // why the batches after those that ran did not
	err := cluster.WhileDown(ctx, func() (err error) {
		// Only a call of which no batch ran may be made again as it is.
		if got, err = slotread.ReadTx(ctx, f.source, txs); len(got) > 0 {
			rest, err = err, nil
		}
		return err
	})
	for i, r := range reads {
		if i >= len(got) {
			f.dropRead(r)
			continue
		}
		r.keys = got[i]
		f.deferTo(r)
	}
	if err == nil && rest != nil && !cluster.IsDown(rest) {
		err = rest
	}
	return len(got), err
}

// deferTo makes the stream's commands on r's copies (not its big keys,
// which are read in chunks) wait for r.
func (f *feeder) deferTo(r *pendingRead) {
	for _, k := range r.keys {
		if !k.Big {
			f.deferred[k.Name] = r.id
		}
	}
	f.deferredCount.Store(int64(len(f.deferred)))
}

// newRead registers a read of the keys path's snapshot about to be made,
// with a marker in slot.
func (f *feeder) newRead(slot uint16) *pendingRead {
	f.readSeq++
	r := &pendingRead{id: f.readSeq, marker: []byte(tempKey(slot, f.opts.TaskID+":marker", 0)), snapshot: true}
	f.pending[f.nonce(r)] = r
	f.keys.reading++
	return r
}

// dropRead forgets a read: its marker came, or the call was not made.
func (f *feeder) dropRead(r *pendingRead) {
	delete(f.pending, f.nonce(r))
	if r.snapshot {
		f.keys.reading--
	}
}

func (f *feeder) nonce(r *pendingRead) string { return strconv.FormatUint(r.id, 10) }

// readOf recognizes a read's marker block in the stream. Besides the
// marker's SET and DEL it may hold DELs of keys that expired as the read
// met them; their state is in the copies.
func (f *feeder) readOf(cmd *stream.Command) *pendingRead {
	for i := range cmd.Tx {
		u := &cmd.Tx[i]
		if len(u.Args) != 3 || u.Name() != "SET" {
			continue
		}
		if r := f.pending[string(u.Args[2])]; r != nil && bytes.Equal(u.Args[1], r.marker) {
			return r
		}
	}
	return nil
}

// finishRead restores the copies as they were at the marker, unless a
// later read covers them too, and lets a listing's slots go.
func (f *feeder) finishRead(r *pendingRead) error {
	f.dropRead(r)
	for _, s := range r.listed {
		f.keys.held[s] = false
	}
	if r.chunk != nil {
		return f.applyChunk(r.chunk)
	}
	for _, k := range r.keys {
		if k.Big || f.deferred[k.Name] != r.id {
			continue
		}
		delete(f.deferred, k.Name)
		if err := f.restore(k, r.snapshot); err != nil {
			return err
		}
	}
	f.deferredCount.Store(int64(len(f.deferred)))
	return nil
}

// restore puts one copy read on the source on the target.
func (f *feeder) restore(k slotread.Key, snapshot bool) error {
	name := []byte(k.Name)
	if k.Gone {
		f.expiring.forget(name)
		return f.send("copy of "+strconv.Quote(k.Name), []byte("DEL"), name)
	}
	if v := rdbparse.DumpVersion(k.Payload); v > f.targetVersion {
		return fmt.Errorf("copy of %q: the source's RDB version %d is newer than the target's %d", k.Name, v, f.targetVersion)
	}
	if snapshot {
		f.stats.keys.Add(1)
		f.stats.bytes.Add(int64(len(k.Payload)))
	}
	f.expiring.track(name, k.ExpireAt)
	f.ttlBuf = strconv.AppendInt(f.ttlBuf[:0], k.ExpireAt, 10)
	return f.app.Send(0, "RESTORE "+k.Name, argRestoreAsking, name, f.ttlBuf, k.Payload, argReplace, argAbsTTL)
}

func describe(cmd *stream.Command) string {
	if cmd.Tx != nil {
		return fmt.Sprintf("MULTI block of %d commands", len(cmd.Tx))
	}
	parts := make([]string, 0, 3)
	for _, a := range cmd.Args[:min(len(cmd.Args), 3)] {
		parts = append(parts, strconv.Quote(string(a)))
	}
	return strings.Join(parts, " ")
}

// tempKey returns a key in slot that no client uses: a hash tag chosen to
// land in that slot, so that RENAME to the real key stays in one slot.
func tempKey(slot uint16, task string, n int) string {
	return fmt.Sprintf("__slotmover:{%s}:%s:%d", slotTags()[slot], task, n)
}

var slotTags = sync.OnceValue(func() *[slots.Count]string {
	var tags [slots.Count]string
	left := slots.Count
	for i := 0; left > 0; i++ {
		tag := strconv.Itoa(i)
		if s := slots.ForString(tag); tags[s] == "" {
			tags[s] = tag
			left--
		}
	}
	return &tags
})

// targetRDBVersion finds the RDB version the target writes, from the footer
// of a DUMP of a scratch key in a slot it imports: RESTORE refuses payloads
// of a newer version, so those keys must be replayed as commands.
func targetRDBVersion(ctx context.Context, target *redis.Client, slot uint16) (int, error) {
	key := tempKey(slot, "rdbversion", 0)
	var dump *redis.StringCmd
	_, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		p.Set(ctx, key, "x", 0)
		p.Do(ctx, "ASKING")
		dump = p.Dump(ctx, key)
		p.Do(ctx, "ASKING")
		p.Del(ctx, key)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("find the target's RDB version: %w", err)
	}
	v := rdbparse.DumpVersion([]byte(dump.Val()))
	if v == 0 {
		return 0, fmt.Errorf("find the target's RDB version: DUMP payload too short")
	}
	return v, nil
}
