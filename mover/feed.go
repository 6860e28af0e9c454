package mover

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/apply"
	"github.com/slotmover/slotmover/rdbparse"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
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
	resyncSeq     uint64
	deferred      map[string]uint64 // key → the resync that will bring it
	resyncs       map[string]*pendingResync
	deferredCount atomic.Int64 // len(deferred), for the cutover's fence
	frozenAt      atomic.Int64 // 1 + the stream offset past which nothing is applied; 0 until the cutover
	warnedSplit   bool
	expiring      *expiring // keys that may expire on the target before a command on them arrives
}

// freeze stops applying the stream at and past off, and freeze(-1) lifts
// that: see cutover.Switch.
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

// run applies the snapshot, closes snapDone once the target has acknowledged
// all of it, then applies the command stream until it fails or ctx ends.
func (f *feeder) run(ctx context.Context, snapDone chan<- struct{}) error {
	if err := f.snapshot(ctx); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	close(snapDone)
	if err := apply.GuardScript.Load(ctx, f.target).Err(); err != nil {
		return fmt.Errorf("load the expiry guard on the target: %w", err)
	}

	r := f.link.Commands(f.keyTable)
	for {
		cmd, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replication stream: %w", err)
		}
		if err := f.applyDelta(ctx, cmd); err != nil {
			return err
		}
	}
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
	for args := range obj.Commands(tmp, f.opts.Chunk) {
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
	if at := f.frozenAt.Load(); at > 0 && cmd.Start >= at-1 {
		f.app.Mark(cmd.End)
		return nil
	}
	for _, k := range f.app.TakeGone() {
		if f.deferred[string(k)] == 0 {
			if err := f.resync(ctx, slots.ForKey(k), [][]byte{k}); err != nil {
				return err
			}
		}
	}
	if r := f.resyncOf(cmd); r != nil {
		if err := f.finishResync(r); err != nil {
			return err
		}
		f.app.Mark(cmd.End)
		return nil
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
	f.app.Mark(cmd.End)
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

// ErrSourceFlushed cancels a move whose source ran FLUSHALL or FLUSHDB.
var ErrSourceFlushed = errors.New("the source ran FLUSHALL/FLUSHDB during the move")

// check refuses what the move cannot carry through.
func (f *feeder) check(u *stream.Command) error {
	switch name := u.Name(); {
	case name == "FLUSHALL" || name == "FLUSHDB":
		return fmt.Errorf("%w (offset %d)", ErrSourceFlushed, u.Start)
	case u.Class == stream.ClassUnknown:
		return fmt.Errorf("command %s at offset %d is not in the source's command table: cannot tell its keys", describe(u), u.Start)
	case u.Class == stream.ClassCrossSlot:
		for _, k := range u.Keys {
			if f.opts.Slots.Contains(slots.ForKey(u.Args[k])) {
				return fmt.Errorf("cross-slot write %s at offset %d touches a moving slot", describe(u), u.Start)
			}
		}
	case u.Class == stream.ClassKeyless:
		f.log.Warn("keyless write on the source not applied to the target", "command", name, "offset", u.Start)
	}
	return nil
}

// applyOne sends one command of the chosen slots to the target.
func (f *feeder) applyOne(ctx context.Context, u *stream.Command) error {
	if u.Class != stream.ClassKeyed || !f.opts.Slots.Contains(u.Slot) {
		return nil
	}
	f.stats.delta.Add(1)
	if h := f.opts.Hooks.Delta; h != nil && !h(u) {
		return nil
	}
	keys := distinctKeys(u)
	if len(keys) == 1 {
		if f.deferred[string(keys[0])] != 0 {
			return nil // its resync will bring the key as it is after this command
		}
		args := absoluteTTL(u.Args, func() int64 { return f.clock.at(u.End) })
		name := u.Name()
		if name == "DEL" || name == "UNLINK" {
			f.expiring.forget(keys[0])
			return f.send(name, args...)
		}
		if f.expiring.guarded(keys[0], time.Now().UnixMilli()) {
			if err := f.app.Send(0, name, argAsking); err != nil {
				return err
			}
			if err := f.app.SendGuarded(name, keys[0], args...); err != nil {
				return err
			}
		} else if err := f.send(name, args...); err != nil {
			return err
		}
		if at, ok := expiryOf(args); ok {
			f.expiring.track(keys[0], at)
		}
		return nil
	}
	switch u.Name() {
	case "DEL", "UNLINK":
		for _, k := range u.Keys {
			f.expiring.forget(u.Args[k])
			if f.deferred[string(u.Args[k])] == 0 {
				if err := f.send(u.Name(), u.Args[0], u.Args[k]); err != nil {
					return err
				}
			}
		}
		return nil
	case "MSET", "MSETNX": // MSETNX reaches the stream only when it set every key
		for _, k := range u.Keys {
			f.expiring.forget(u.Args[k]) // MSET leaves no TTL
			if f.deferred[string(u.Args[k])] == 0 && k+1 < len(u.Args) {
				if err := f.send(u.Name(), argSet, u.Args[k], u.Args[k+1]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// Keys already waiting for a resync need no other: its copy is read at
	// a later point of the stream than this command, so it holds its effect.
	keys = slices.DeleteFunc(keys, func(k []byte) bool { return f.deferred[string(k)] != 0 })
	if len(keys) == 0 {
		return nil
	}
	return f.resync(ctx, u.Slot, keys)
}

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

// pendingResync is a copy of some keys read on the source in the same
// transaction as a marker write, so that the marker's place in the stream
// is exactly the moment the copy shows.
type pendingResync struct {
	id     uint64
	marker []byte
	keys   []string
	dumps  []*redis.StringCmd
	ttls   []*redis.DurationCmd
	now    *redis.TimeCmd // the source's clock when it read them
}

// resync handles a multi-key write the target would refuse: its keys are
// read on the source (DUMP, PTTL, and TIME for the moment: PEXPIRETIME is
// 7.0+) in one MULTI with a marker write (SET then DEL of a key of the same
// slot, which nothing else uses), and every later command on them is
// skipped until the marker comes through the stream, where the copies are
// RESTOREd: the state the keys have there.
func (f *feeder) resync(ctx context.Context, slot uint16, keys [][]byte) error {
	f.resyncSeq++
	r := &pendingResync{id: f.resyncSeq, marker: []byte(tempKey(slot, f.opts.TaskID+":marker", 0))}
	nonce := strconv.FormatUint(r.id, 10)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := f.source.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.now = p.Time(ctx)
		for _, k := range keys {
			r.keys = append(r.keys, string(k))
			r.dumps = append(r.dumps, p.Dump(ctx, string(k)))
			r.ttls = append(r.ttls, p.PTTL(ctx, string(k)))
		}
		p.Set(ctx, string(r.marker), nonce, 0)
		p.Del(ctx, string(r.marker))
		return nil
	})
	if err != nil && err != redis.Nil {
		return fmt.Errorf("resync of %d keys from the source: %w", len(keys), err)
	}
	for _, k := range r.keys {
		f.deferred[k] = r.id
	}
	f.resyncs[nonce] = r
	f.deferredCount.Store(int64(len(f.deferred)))
	f.stats.resynced.Add(int64(len(keys)))
	return nil
}

// resyncOf recognizes a resync's marker block in the stream. Besides the
// marker's SET and DEL it may hold DELs of the resync's keys that expired
// as it read them; their state is in the copies.
func (f *feeder) resyncOf(cmd *stream.Command) *pendingResync {
	for i := range cmd.Tx {
		u := &cmd.Tx[i]
		if len(u.Args) != 3 || u.Name() != "SET" {
			continue
		}
		if r := f.resyncs[string(u.Args[2])]; r != nil && bytes.Equal(u.Args[1], r.marker) {
			return r
		}
	}
	return nil
}

// finishResync restores the keys as they were at the marker, unless a later
// resync covers them too.
func (f *feeder) finishResync(r *pendingResync) error {
	delete(f.resyncs, strconv.FormatUint(r.id, 10))
	for i, k := range r.keys {
		if f.deferred[k] != r.id {
			continue
		}
		delete(f.deferred, k)
		payload, err := r.dumps[i].Bytes()
		switch {
		case err == redis.Nil:
			f.expiring.forget([]byte(k))
			err = f.send("resync", []byte("DEL"), []byte(k))
		case err != nil:
			return fmt.Errorf("resync of %q: DUMP on the source: %w", k, err)
		default:
			if v := rdbparse.DumpVersion(payload); v > f.targetVersion {
				return fmt.Errorf("resync of %q: the source's RDB version %d is newer than the target's %d", k, v, f.targetVersion)
			}
			var at int64
			if d := r.ttls[i].Val(); d > 0 {
				at = r.now.Val().UnixMilli() + d.Milliseconds()
			}
			f.expiring.track([]byte(k), at)
			f.ttlBuf = strconv.AppendInt(f.ttlBuf[:0], at, 10)
			err = f.app.Send(0, "RESTORE "+k, argRestoreAsking, []byte(k), f.ttlBuf, payload, argReplace, argAbsTTL)
		}
		if err != nil {
			return err
		}
	}
	f.deferredCount.Store(int64(len(f.deferred)))
	return nil
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
