package mover

import (
	"hash/maphash"
	"time"
)

// The target is a master: it expires keys by its own clock, where a
// replica would wait for its master's DEL. A key copied with a TTL that the
// application extends on the source before it runs out can so expire on
// the target before the extension arrives through the stream (late by the
// snapshot's length, for a write made during it, or by a stall of the
// target); the extension then finds no key, and a later INCR or HSET makes
// a new one without a TTL. So can a key that expired before the snapshot
// reached it. Commands on such keys of the snapshot are sent through
// apply.GuardScript, which runs them only if the key still exists on the
// target and else answers that it is gone: the key is then read again from
// the source (a resync), which holds every command on it up to that point,
// and is guarded no more. Keys that the stream or a resync gives a TTL reach the
// target within the catch-up's lag of milliseconds, and are not guarded:
// guarding them would turn every short-lived key (a rate limiter's) into a
// resync.

// expiryHorizon bounds which keys are guarded: those whose expiry time, as
// last copied or set, is less than this far ahead. Past it, a move would
// have to run longer than this for the race to happen.
const expiryHorizon = 10 * time.Minute

// expiring is the set of keys to guard, by a hash of their names (a
// collision only guards a key that needs none), with the expiry time last
// seen for them.
type expiring struct {
	seed maphash.Seed
	at   map[uint64]int64
}

func newExpiring() *expiring {
	return &expiring{seed: maphash.MakeSeed(), at: map[uint64]int64{}}
}

// track notes that key expires at ms (Unix ms; 0 for no TTL): within the
// horizon, it is guarded from now on.
func (x *expiring) track(key []byte, ms int64) {
	if ms > 0 && ms < time.Now().Add(expiryHorizon).UnixMilli() {
		x.at[maphash.Bytes(x.seed, key)] = ms
	}
}

func (x *expiring) forget(key []byte) { delete(x.at, maphash.Bytes(x.seed, key)) }

func (x *expiring) guarded(key []byte) bool {
	_, ok := x.at[maphash.Bytes(x.seed, key)]
	return ok
}
