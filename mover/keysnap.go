package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
)

// keySnapshot is the snapshot of the keys path: the link continues the
// source's history from a point (no fork, no RDB), then the chosen slots
// are listed a group at a time and their keys read in batches of one slot,
// each call marked in the stream (see package slotread), while the stream
// is applied: a slot's commands are skipped until its listing's marker (the
// listing holds their effect), a listed key's until its batch's marker.
type keySnapshot struct {
	groups  [][]uint16 // slots not listed yet, a listing call each
	queue   []listed   // listed keys not read yet
	held    []bool     // by slot: listing not yet passed in the stream
	reading int        // listings and batches whose marker has not come
	lim     slotread.Limits
}

// listed is the keys of one slot a listing found, not read yet.
type listed struct {
	slot uint16
	keys []string
}

// Bounds of the keys path's calls on the source: each call must hold its
// main thread for about a millisecond at most.
const (
	listKeysPerCall = 10_000 // keys a listing call may return
	readKeysPerCall = 512    // keys a batch names
	readBudget      = 2_000  // elements (or 64-byte units of strings) a batch reads
	readsAhead      = 8      // calls made before their marker came through the stream
)

func newKeySnapshot(groups [][]uint16, big int64) *keySnapshot {
	ks := &keySnapshot{groups: groups, held: make([]bool, slots.Count), lim: slotread.Limits{Budget: readBudget, Big: big}}
	for _, g := range groups {
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
		for ks.reading < readsAhead && (len(ks.queue) > 0 || len(ks.groups) > 0) {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			if len(ks.queue) == 0 {
				err = f.listNext(ctx)
			} else {
				err = f.readNext(ctx)
			}
			if err != nil {
				return err
			}
		}
		if ks.reading == 0 && len(ks.queue) == 0 && len(ks.groups) == 0 {
			break
		}
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
		end = cmd.End
	}
	return f.app.Wait(ctx, end)
}

// listNext lists the next group of slots; a group that has grown past what
// one call may list is split in two.
func (f *feeder) listNext(ctx context.Context) error {
	ks := f.keys
	group := ks.groups[0]
	r := f.newRead(group[0], true)
	lists, err := slotread.List(ctx, f.source, group, string(r.marker), f.nonce(r), listKeysPerCall)
	var tooMany *slotread.TooManyKeys
	if errors.As(err, &tooMany) && len(group) > 1 {
		delete(f.pending, f.nonce(r))
		half := len(group) / 2
		ks.groups = append([][]uint16{group[:half], group[half:]}, ks.groups[1:]...)
		return nil
	}
	if err != nil {
		return fmt.Errorf("list slot %d…: %w", group[0], err)
	}
	ks.groups = ks.groups[1:]
	ks.reading++
	r.listed = group
	for i, keys := range lists {
		if len(keys) == 0 {
			continue
		}
		for _, k := range keys {
			f.deferred[k] = awaitingRead
		}
		ks.queue = append(ks.queue, listed{slot: group[i], keys: keys})
	}
	f.deferredCount.Store(int64(len(f.deferred)))
	return nil
}

// readNext reads the next batch of listed keys, as many as one call may.
func (f *feeder) readNext(ctx context.Context) error {
	ks := f.keys
	head := &ks.queue[0]
	batch := head.keys[:min(len(head.keys), readKeysPerCall)]
	got, err := f.read(ctx, head.slot, batch, ks.lim, true)
	if err != nil {
		return fmt.Errorf("read keys of slot %d: %w", head.slot, err)
	}
	ks.reading++
	for _, k := range got {
		if k.Big {
			return fmt.Errorf("key %q of slot %d, a %s of %d elements, is %w: move these slots with the RDB snapshot", k.Name, head.slot, k.Type, k.Units, ErrBigKey)
		}
	}
	head.keys = head.keys[len(got):]
	if len(head.keys) == 0 {
		ks.queue = ks.queue[1:]
	}
	return nil
}
