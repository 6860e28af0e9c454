package mover

import (
	"bytes"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/stream"
)

// reads is the ledger of the reads on the source whose place in the
// stream has not come yet: the keys path's listings, batches and chunks,
// each marked by a write in the stream (see package slotread), and the
// resyncs, each read at an offset. A command on a key such a read holds
// back is skipped: the read brings the key as it is after the command.
// It does no I/O: the lister and the resyncs make the reads, the feeder
// finishes them where the stream reaches them.
type reads struct {
	task       string // names the markers
	seq        uint64
	deferred   map[string]uint64       // key → the read that will bring it (awaitingRead: one not made yet)
	pending    map[string]*pendingRead // marked reads whose marker has not come, by nonce
	positioned []*pendingRead          // resyncs read at an offset the stream has not reached, in its order
	count      atomic.Int64            // len(deferred), for the cutover's fence
}

func newReads(task string) *reads {
	return &reads{task: task, deferred: map[string]uint64{}, pending: map[string]*pendingRead{}}
}

// pendingRead is a read on the source whose place in the stream is
// exactly the moment the read shows: a copy of some keys, or a listing of
// slots for the keys path's snapshot, made in one call with a marker
// write (see package slotread); or a resync, read at an offset.
type pendingRead struct {
	id     uint64
	marker []byte
	at     int64          // a resync's offset (slotread.ReadAt)
	keys   []slotread.Key // the copies, restored at the marker
	listed []uint16       // a listing's slots, held until the marker
	chunk  *chunkCopy     // a chunk of a big key
}

func (r *pendingRead) nonce() string { return strconv.FormatUint(r.id, 10) }

// ofSnapshot: a read of the keys path's snapshot (those are marked; a
// resync is read at an offset).
func (r *pendingRead) ofSnapshot() bool { return r.marker != nil }

// awaitingRead marks a listed key whose read is not made yet.
const awaitingRead = math.MaxUint64

// marked registers a read of the keys path's snapshot about to be made,
// with a marker in slot.
func (rs *reads) marked(slot uint16) *pendingRead {
	rs.seq++
	r := &pendingRead{id: rs.seq, marker: []byte(tempKey(slot, rs.task+":marker", 0))}
	rs.pending[r.nonce()] = r
	return r
}

// inFlight is the marked reads whose marker has not come.
func (rs *reads) inFlight() int { return len(rs.pending) }

// drop forgets a read: its marker came, or the call was not made.
func (rs *reads) drop(r *pendingRead) { delete(rs.pending, r.nonce()) }

// readAt registers a resync of keys read at offset at: the stream's
// commands on them wait for it.
func (rs *reads) readAt(at int64, keys []slotread.Key) *pendingRead {
	rs.seq++
	r := &pendingRead{id: rs.seq, at: at, keys: keys}
	rs.deferTo(r)
	rs.positioned = append(rs.positioned, r)
	return r
}

// deferTo makes the stream's commands on r's copies (not its big keys,
// which are read in chunks) wait for r.
func (rs *reads) deferTo(r *pendingRead) {
	for _, k := range r.keys {
		if !k.Big {
			rs.deferred[k.Name] = r.id
		}
	}
	rs.counted()
}

// await makes the stream's commands on keys wait for a read not made yet.
func (rs *reads) await(keys ...string) {
	for _, k := range keys {
		rs.deferred[k] = awaitingRead
	}
	rs.counted()
}

// release lets the stream's commands on key apply again.
func (rs *reads) release(key string) {
	delete(rs.deferred, key)
	rs.counted()
}

func (rs *reads) isDeferred(key []byte) bool { return rs.deferred[string(key)] != 0 }

func (rs *reads) counted() { rs.count.Store(int64(len(rs.deferred))) }

// of recognizes a read's marker block in the stream. Besides the marker's
// SET and DEL it may hold DELs of keys that expired as the read met them;
// their state is in the copies.
func (rs *reads) of(cmd *stream.Command) *pendingRead {
	for i := range cmd.Tx {
		u := &cmd.Tx[i]
		if len(u.Args) != 3 || u.Name() != "SET" {
			continue
		}
		if r := rs.pending[string(u.Args[2])]; r != nil && bytes.Equal(u.Args[1], r.marker) {
			return r
		}
	}
	return nil
}

// due returns the first resync read at or before offset end, and takes it
// off the list; nil if there is none.
func (rs *reads) due(end int64) *pendingRead {
	if len(rs.positioned) == 0 || rs.positioned[0].at > end {
		return nil
	}
	r := rs.positioned[0]
	rs.positioned = rs.positioned[1:]
	return r
}

// finish ends r where the stream reached it, and returns the copies it
// brings: those no later read covers too (a later read holds a later state).
func (rs *reads) finish(r *pendingRead) []slotread.Key {
	rs.drop(r)
	var out []slotread.Key
	for _, k := range r.keys {
		if k.Big || rs.deferred[k.Name] != r.id {
			continue
		}
		delete(rs.deferred, k.Name)
		out = append(out, k)
	}
	rs.counted()
	return out
}
