package mover

import (
	"errors"
	"fmt"
	"slices"

	"github.com/slotmover/slotmover/slots"

	"github.com/slotmover/slotmover/stream"
)

// The delta player's rules: what one write of the source's stream does to
// the target, decided from what the move knows, with no I/O, so that each
// rule whose mistake would lose a write is table-tested (player_test.go).
// The feeder runs the plays (applyOne) and keeps what the view reads.

// playerView is what the player knows when it decides.
type playerView interface {
	// moving: the slot is one the move carries.
	moving(slot uint16) bool
	// listedLater: the keys path lists the slot later in the stream, and
	// the listing holds the command's effect.
	listedLater(slot uint16) bool
	// deferred: a read of the key, placed later in the stream than this
	// command, is pending: it brings the key as it is after the command.
	deferred(key []byte) bool
	// chunked: a big key of the keys path read in chunks, started.
	chunked(key []byte) bool
	// inOrder: a sorted set chunked in its order (see bigRead).
	inOrder(key []byte) bool
	// guarded: the key's expiry is near (or past): a command on it could
	// reach the target after the target expired it (see expiring).
	guarded(key []byte) bool
	// sourceTime is the source's clock, Unix ms, when the command that
	// ends at offset end ran: what its relative TTLs count from.
	sourceTime(end int64) int64
}

type playKind uint8

const (
	// playSend sends args behind ASKING; name labels it in errors.
	playSend playKind = iota + 1
	// playSendGuarded sends args through the expiry guard, which runs them
	// only if key still exists on the target (else it is resynced).
	playSendGuarded
	// playForget: key has no TTL any more, or no key: the guard drops it.
	playForget
	// playTrack: key expires at at (Unix ms; 0: it has no TTL).
	playTrack
	// playRestart reads a big key read in chunks again from its start,
	// because of command name.
	playRestart
	// playResync reads keys again from the source, at a point of the
	// stream later than this command (see feeder.resync).
	playResync
)

// A play is one step of what a command does to the target.
type play struct {
	kind playKind
	name string
	key  []byte
	args [][]byte
	keys [][]byte // playResync
	at   int64    // playTrack
}

// ErrSourceFlushed cancels a move whose source ran FLUSHALL or FLUSHDB.
var ErrSourceFlushed = errors.New("the source ran FLUSHALL/FLUSHDB during the move")

// refusal says why u ends the move, nil if it does not: the source was
// flushed, a command whose keys cannot be told, or a write across slots
// that touches a moving one (its parts cannot be split by slot).
func refusal(u *stream.Command, v playerView) error {
	switch name := u.Name(); {
	case name == "FLUSHALL" || name == "FLUSHDB":
		return fmt.Errorf("%w (offset %d)", ErrSourceFlushed, u.Start)
	case u.Class == stream.ClassUnknown:
		return fmt.Errorf("command %s at offset %d is not in the source's command table: cannot tell its keys", describe(u), u.Start)
	case u.Class == stream.ClassCrossSlot:
		for _, k := range u.Keys {
			if v.moving(slots.ForKey(u.Args[k])) {
				return fmt.Errorf("cross-slot write %s at offset %d touches a moving slot", describe(u), u.Start)
			}
		}
	}
	return nil
}

// isDelta says whether u is a write of the move's delta: a keyed command
// of a moving slot that no later listing of the keys path holds.
func isDelta(u *stream.Command, v playerView) bool {
	return u.Class == stream.ClassKeyed && v.moving(u.Slot) && !v.listedLater(u.Slot)
}

// playsOf returns the plays of delta command u, in order; none when what
// the move reads later already holds u's effect.
func playsOf(u *stream.Command, v playerView) []play {
	keys := distinctKeys(u)
	name := u.Name()
	if len(keys) == 1 {
		key := keys[0]
		if v.deferred(key) {
			return nil
		}
		if v.chunked(key) && (positional(name) || v.inOrder(key) && relative(name, u.Args)) {
			// A part of a sorted set has not its elements' order; one read
			// in order may lack a member that the write moves before the
			// last one read, never to be read again.
			return []play{{kind: playRestart, name: name, key: key}}
		}
		args := absoluteTTL(u.Args, func() int64 { return v.sourceTime(u.End) })
		if name == "DEL" || name == "UNLINK" {
			return []play{{kind: playForget, key: key}, {kind: playSend, name: name, args: args}}
		}
		send := play{kind: playSend, name: name, args: args}
		if v.guarded(key) {
			send = play{kind: playSendGuarded, name: name, key: key, args: args}
		}
		plays := []play{send}
		if at, ok := expiryOf(args); ok {
			plays = append(plays, play{kind: playTrack, key: key, at: at})
		}
		return plays
	}
	var plays []play
	switch name {
	case "DEL", "UNLINK": // split per key: the target refuses keys of other slots together
		for _, k := range u.Keys {
			plays = append(plays, play{kind: playForget, key: u.Args[k]})
			if !v.deferred(u.Args[k]) {
				plays = append(plays, play{kind: playSend, name: name, args: [][]byte{u.Args[0], u.Args[k]}})
			}
		}
		return plays
	case "MSET", "MSETNX": // MSETNX reaches the stream only when it set every key
		for _, k := range u.Keys {
			plays = append(plays, play{kind: playForget, key: u.Args[k]}) // MSET leaves no TTL
			if !v.deferred(u.Args[k]) && k+1 < len(u.Args) {
				plays = append(plays, play{kind: playSend, name: name, args: [][]byte{argSet, u.Args[k], u.Args[k+1]}})
			}
		}
		return plays
	}
	// Any other multi-key write is resynced. Keys already waiting for a
	// read need no other: it is placed later in the stream than this
	// command, so it holds its effect. A big key being read in chunks is
	// read again from its start, not in one call.
	keys = slices.DeleteFunc(keys, v.deferred)
	var rest [][]byte
	for _, k := range keys {
		if v.chunked(k) {
			plays = append(plays, play{kind: playRestart, name: name, key: k})
		} else {
			rest = append(rest, k)
		}
	}
	if len(rest) > 0 {
		plays = append(plays, play{kind: playResync, keys: rest})
	}
	return plays
}
