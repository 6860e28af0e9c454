package mover

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
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
)

// feeder moves data from the replica link to the target, in order, on one
// pipelined connection: the snapshot of the chosen slots (the RDB copier's,
// or the keys-path lister's, whose reads it finishes where their markers
// come in the stream), then the command stream filtered to them. It runs
// what the delta player decides (player.go) and keeps what the player
// reads.
type feeder struct {
	opts  *Options // the move's: its slots, task ID, chunking
	log   *slog.Logger
	stats *copyStats   // what the task reports
	clock *sourceClock // the source's clock, for relative TTLs

	link          *stream.Link
	app           *apply.Applier
	keyTable      *stream.KeyTable
	targetVersion int

	// The snapshot: one of the two is set.
	rdb  *rdbCopier // the RDB path's
	keys *keyLister // the keys path's

	source      *redis.Client // for resyncs
	reads       *reads        // the reads whose place in the stream is to come
	ttlBuf      []byte
	frozenAt    atomic.Int64 // 1 + the stream offset past which nothing is applied; 0 until the cutover
	warnedSplit bool
	expiring    *expiring // keys that may expire on the target before a command on them arrives
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
	if f.rdb != nil {
		if err := f.rdb.copy(ctx, f.link.RDB(), f.link.Offset); err != nil {
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
		if !f.reads.isDeferred(k) {
			if err := f.resync(ctx, [][]byte{k}); err != nil {
				return err
			}
		}
	}
	if r := f.reads.of(cmd); r != nil {
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
func (v feederView) deferred(key []byte) bool     { return v.f.reads.isDeferred(key) }
func (v feederView) chunked(key []byte) bool      { return v.f.keys.chunked(key) != nil }
func (v feederView) inOrder(key []byte) bool {
	b := v.f.keys.chunked(key)
	return b != nil && b.ordered
}
func (v feederView) guarded(key []byte) bool    { return v.f.expiring.guarded(key, v.now) }
func (v feederView) sourceTime(end int64) int64 { return v.f.clock.at(end) }

func (f *feeder) send(label string, args ...[]byte) error { return sendAsking(f.app, label, args...) }

// sendAsking sends one command behind ASKING; label names it in errors.
func sendAsking(app *apply.Applier, label string, args ...[]byte) error {
	if err := app.Send(0, label, argAsking); err != nil {
		return err
	}
	return app.Send(0, label, args...)
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
	f.reads.readAt(at, got)
	f.stats.resynced.Add(int64(len(keys)))
	return nil
}

// finishPositioned restores the resyncs read at or before offset end, once
// the stream has been applied through end. A resync read past the point
// where the stream was frozen shows the source after it let go of the
// slots (orphans it expired since): it must not reach the target.
func (f *feeder) finishPositioned(end int64) error {
	for r := f.reads.due(end); r != nil; r = f.reads.due(end) {
		if fz := f.frozenAt.Load(); fz > 0 && r.at > fz-1 {
			return fmt.Errorf("a resync of %d keys was read at offset %d, after the source released the slots at %d", len(r.keys), r.at, fz-1)
		}
		if err := f.finishRead(r); err != nil {
			return err
		}
	}
	return nil
}

// finishRead restores the copies as they were at the marker, unless a
// later read covers them too, and lets a listing's slots go.
func (f *feeder) finishRead(r *pendingRead) error {
	for _, s := range r.listed {
		f.keys.held[s] = false
	}
	for _, k := range f.reads.finish(r) {
		if err := f.restore(k, r.ofSnapshot()); err != nil {
			return err
		}
	}
	if r.chunk != nil {
		return f.applyChunk(r.chunk)
	}
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
