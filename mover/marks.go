package mover

import (
	"context"
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

// markOneByOne is setImporting where SETSLOT cannot run in a script: the
// marks are checked, then set. Two moves of the same slots into this
// target that check at the same moment could both go on; both copy the
// same keys from the same source, and at the cutover the second finds the
// slots gone from its source and rolls back without touching what the
// target owns by then.
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
	if err := cutover.SetSlots(ctx, t.p.target, t.opts.Slots.Slots(), "IMPORTING", t.p.sourceID); err != nil {
		return fmt.Errorf("mark the slots importing: %w", err)
	}
	return nil
}

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
