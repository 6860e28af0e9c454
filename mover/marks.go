package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
)

// The importing phase: the target's IMPORTING marks on the chosen slots,
// set all or none, and taken back when another move holds the same slots.

// setImporting marks every chosen slot IMPORTING from the source on the
// target, all or none: see markScript.
func (t *task) setImporting(ctx context.Context) error {
	if t.p.setSlotBlocks {
		if err := t.markOneByOne(ctx); err != nil {
			return err
		}
	} else {
		args := []any{t.p.sourceID}
		for _, s := range t.opts.Slots.Slots() {
			args = append(args, s)
		}
		// EVAL, not Run: its EVALSHA would count a NOSCRIPT in the
		// operator's error statistics on a node that has not seen it.
		busy, err := markScript.Eval(ctx, t.p.target, nil, args...).Int64()
		if err != nil {
			return fmt.Errorf("mark the slots importing on target %s: %w", t.opts.Target.Addr, err)
		}
		if busy >= 0 {
			return refuse("target %s: slot %d is migrating or importing already (another move of it under way?)", t.opts.Target.Addr, busy)
		}
	}
	// Another target may import the same slots (a move of them to another
	// node started at the same moment): only each node's own view shows
	// its marks. Whoever sees the other's marks after setting its own backs
	// off, so at most one of the two goes on to copy.
	for _, o := range t.p.others {
		top, err := cluster.Load(ctx, o)
		if err != nil {
			return err
		}
		for _, s := range t.opts.Slots.Slots() {
			if from, ok := top.Myself.Importing[s]; ok {
				t.unlock(ctx) // while its slot still imports: ASKING reaches it
				if uerr := t.clearMarks(ctx); uerr != nil {
					return fmt.Errorf("slot %d is importing on %s too, and clearing this move's marks failed: %w", s, top.Myself.Addr, uerr)
				}
				return refuse("slot %d is importing on %s from %s too (another move of it under way?)", s, top.Myself.Addr, from)
			}
		}
	}
	return nil
}

// clearMarks sets the chosen slots STABLE on the target again.
func (t *task) clearMarks(ctx context.Context) error {
	return cutover.SetSlots(ctx, t.p.target, t.opts.Slots.Slots(), "STABLE")
}

// markOneByOne is setImporting where SETSLOT cannot run in a script
// (Valkey 8): the marks are checked, then set, so two moves of the same
// slots into this target that check at the same moment both set them (the
// same marks: both import from the slots' owner). Then each takes a lock
// on the target, a key of the first slot written with ASKING and NX: the
// loser backs off (refused), leaving the marks to the winner, before it
// copies anything. Without it both would copy, both replay the stream
// (an INCR twice), and the loser's writes would land on the slots after
// the winner's claim. The winner drops the lock right before its claim
// (see cutover.Plan.BeforeClaim), and at its end whatever happened.
func (t *task) markOneByOne(ctx context.Context) error {
	top, err := cluster.Load(ctx, t.p.target)
	if err != nil {
		return err
	}
	for _, s := range t.opts.Slots.Slots() {
		_, importing := top.Myself.Importing[s]
		_, migrating := top.Myself.Migrating[s]
		if importing || migrating {
			return refuse("target %s: slot %d is migrating or importing already (another move of it under way?)", t.opts.Target.Addr, s)
		}
	}
	if h := t.opts.Hooks.BeforeMarks; h != nil {
		h()
	}
	if err := cutover.SetSlots(ctx, t.p.target, t.opts.Slots.Slots(), "IMPORTING", t.p.sourceID); err != nil {
		return fmt.Errorf("mark the slots importing: %w", err)
	}
	key := LockKey(t.opts.Slots.Slots()[0])
	var set *redis.Cmd
	if _, err := t.p.target.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		set = p.Do(ctx, "SET", key, t.sum.TaskID, "NX", "GET") // the holder, or nil once ours
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("lock the slots on target %s: %w", t.opts.Target.Addr, err)
	}
	if holder, err := set.Text(); err == nil {
		return refuse("target %s: another move of slots %s into it (task %s) holds them: this one backs off and leaves the marks to it", t.opts.Target.Addr, t.opts.Slots, holder)
	}
	t.lock = key
	// A move that checked before the winner set its marks, and got the lock
	// only once the winner had dropped it for its claim, finds the slots
	// claimed, or the winner's copies.
	if top, err = cluster.Load(ctx, t.p.target); err != nil {
		return err
	}
	counts, err := cluster.CountKeys(ctx, t.p.target, t.opts.Slots.Slots())
	if err != nil {
		return err
	}
	var held int64
	for i, s := range t.opts.Slots.Slots() {
		held += counts[i]
		if top.Myself.Importing[s] != t.p.sourceID {
			t.unlock(ctx)
			return refuse("target %s: slot %d is no longer imported from %s (another move of it finished?)", t.opts.Target.Addr, s, t.opts.Source.Addr)
		}
	}
	if held != 1 {
		t.unlock(ctx)
		return refuse("target %s: holds %d keys of the slots besides this move's lock (another move's copies?)", t.opts.Target.Addr, held-1)
	}
	return nil
}

// LockKey is the key of slot that locks a move of it on its target where
// the importing marks cannot be set in one script (see markOneByOne). fix
// counts it as no key of the slot.
func LockKey(slot uint16) string { return tempKey(slot, "lock", 0) }

// unlock drops the move's lock on the target, if it still holds it: a
// script deletes the key only if it still names this move. Errors are
// logged: the lock is dropped again at the move's end.
func (t *task) unlock(ctx context.Context) {
	if t.lock == "" {
		return
	}
	err := func() error {
		_, err := t.p.target.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			unlockScript.Eval(ctx, p, []string{t.lock}, t.sum.TaskID)
			return nil
		})
		return err
	}()
	if err != nil {
		t.log.Warn("could not drop the move's lock on the target; tried again at its end", "key", t.lock, "error", err)
		return
	}
	t.lock = ""
}

var unlockScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// markScript sets the slots (ARGV[2…]) IMPORTING from the source
// (ARGV[1]) unless one of them is migrating or importing already: checked
// and set in one step, so that of two moves of the same slots that both
// passed the preflight, one gets the slots and the other is refused with
// nothing changed. It returns that slot, or -1 once it set them all.
var markScript = redis.NewScript(`local open = {}
for line in string.gmatch(redis.call('CLUSTER', 'NODES'), '[^\n]+') do
  local flags = string.match(line, '^%S+ %S+ (%S+)')
  if flags and string.find(',' .. flags .. ',', ',myself,', 1, true) then
    for slot in string.gmatch(line, '%[(%d+)%-[<>]%-') do open[slot] = true end
  end
end
for i = 2, #ARGV do
  if open[ARGV[i]] then
    return tonumber(ARGV[i])
  end
end
for i = 2, #ARGV do redis.call('CLUSTER', 'SETSLOT', ARGV[i], 'IMPORTING', ARGV[1]) end
return -1`)
