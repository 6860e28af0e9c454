package mover

import (
	"hash/maphash"
	"time"
)

// The target is a master: it expires keys by its own clock, where a
// replica would wait for its master's DEL. A command the source ran on a
// key before the key's expiry can so reach the target after it: late by
// the snapshot's length for a write made during it (the stream waits for
// the snapshot), by a stall of the target, or by the catch-up's lag. It
// then finds no key: an extension (PEXPIREAT) does nothing, and an INCR or
// HSET makes a new key from nothing, without a TTL.
//
// So the feeder keeps the expiry time of every key it gives one, from the
// snapshot, the stream and resyncs alike, and a command on a key whose
// expiry is less than guardAhead away, or past, is sent through
// apply.GuardScript: it runs only if the key still exists on the target,
// and else the guard answers that it is gone and the key is read again
// from the source (a resync), which holds every command on it up to that
// point. Commands on keys further from their expiry go as they are: the
// target runs them well before it could expire the key. A key that expired
// on the source too does not resync: the source streams its DEL before any
// later write to it, and DEL needs no guard.
//
// Every key with a TTL is kept, however far its expiry: a move lasts as
// long as its snapshot and catch-up do, and any expiry may come during it
// (an earlier form kept only those within 10 minutes, and a longer
// snapshot lost the keys extended meanwhile). It costs the mover 20 to 40
// bytes per key with a TTL in the moving slots.

// guardAhead is how close to its expiry a key's commands go through the
// guard: room for the time a command waits in the applier's pipeline, and
// for the target's clock running ahead of ours.
const guardAhead = 5 * time.Second

// expiring is the set of keys with an expiry, by a hash of their names (a
// collision only guards a key that needs none), with that expiry time.
type expiring struct {
	seed maphash.Seed
	at   map[uint64]int64
}

func newExpiring() *expiring {
	return &expiring{seed: maphash.MakeSeed(), at: map[uint64]int64{}}
}

// track notes that key expires at ms (Unix ms; 0 for no TTL).
func (x *expiring) track(key []byte, ms int64) {
	if ms > 0 {
		x.at[maphash.Bytes(x.seed, key)] = ms
	} else if len(x.at) > 0 {
		x.forget(key)
	}
}

func (x *expiring) forget(key []byte) { delete(x.at, maphash.Bytes(x.seed, key)) }

// guarded reports whether a command on key, sent at now (Unix ms), must go
// through the guard.
func (x *expiring) guarded(key []byte, now int64) bool {
	if len(x.at) == 0 {
		return false
	}
	at, ok := x.at[maphash.Bytes(x.seed, key)]
	return ok && at < now+guardAhead.Milliseconds()
}
