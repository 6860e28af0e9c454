package planner

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/slots"
)

// BigKeyOptions bound how FindBigKeys looks for big keys.
type BigKeyOptions struct {
	// Bytes: keys whose MEMORY USAGE is at least this are big; 0 for
	// DefaultBigKeyBytes.
	Bytes int64
	// PerSlot is how many keys of a slot are sized (the first ones CLUSTER
	// GETKEYSINSLOT lists: it has no cursor); 0 for DefaultBigKeyPerSlot.
	PerSlot int
	// PerMove is how many keys of a move are sized at most; 0 for
	// DefaultBigKeyPerMove.
	PerMove int64
}

// Defaults of BigKeyOptions.
const (
	DefaultBigKeyBytes   = 1 << 20
	DefaultBigKeyPerSlot = 1000
	DefaultBigKeyPerMove = 1_000_000
)

// bigKeyRound is about how many keys one round trip sizes. The source
// runs a round's scripts back to back, so this bounds how long its other
// clients wait behind one: MEMORY USAGE with 5 samples takes about a
// microsecond a key, strings and collections alike.
const bigKeyRound = 2000

// bigKeyScript sizes up to ARGV[2] keys of slot ARGV[1] and returns how
// many it sized and, flat, the name, bytes and type of each of at least
// ARGV[3] bytes: only the big ones cross the network. One slot per call:
// a script that touches keys of several slots without declaring them is
// refused by Redis 7. SAMPLES 5 (the server's default, said to be sure)
// keeps a collection's sizing to a few of its elements, not all of them.
var bigKeyScript = redis.NewScript(`
local keys = redis.call('CLUSTER', 'GETKEYSINSLOT', ARGV[1], ARGV[2])
local big = {}
for _, k in ipairs(keys) do
  local b = redis.call('MEMORY', 'USAGE', k, 'SAMPLES', '5')
  if b and b >= tonumber(ARGV[3]) then
    big[#big + 1] = k
    big[#big + 1] = b
    big[#big + 1] = redis.call('TYPE', k).ok
  end
end
return {#keys, big}`)

// FindBigKeys sizes the keys of every move's slots on the move's source
// and lists those of at least o.Bytes in the move (Move.BigKeys), by
// either weight: a big key is what makes one move slower than its key
// count says. It sizes at most o.PerSlot keys of a slot and o.PerMove of
// a move, and notes in the plan the moves it sized only in part. v gives
// each slot's keys, to skip the empty ones. Every source is reached as
// seed is.
func FindBigKeys(ctx context.Context, seed cluster.Conn, v *View, p *Plan, o BigKeyOptions) error {
	if o.Bytes <= 0 {
		o.Bytes = DefaultBigKeyBytes
	}
	if o.PerSlot <= 0 {
		o.PerSlot = DefaultBigKeyPerSlot
	}
	if o.PerMove <= 0 {
		o.PerMove = DefaultBigKeyPerMove
	}
	p.BigKeyBytes = o.Bytes
	for i := range p.Moves {
		m := &p.Moves[i]
		set, err := slots.Parse(m.Slots)
		if err != nil {
			return fmt.Errorf("move %d: %w", i+1, err)
		}
		sized, err := bigKeysOfMove(ctx, seed.With(m.Source), v, set, m, o)
		if err != nil {
			return fmt.Errorf("look for big keys of move %d on %s: %w", i+1, m.Source, err)
		}
		if sized < m.Keys {
			p.Notes = append(p.Notes, fmt.Sprintf("move %d: big keys looked for among %d of its %d keys (the first %d of a slot, at most %d a move)", i+1, sized, m.Keys, o.PerSlot, o.PerMove))
		}
	}
	return nil
}

// bigKeysOfMove sizes the keys of set on the source conn, a round trip
// at a time, adds the big ones to m, and returns how many keys it sized.
func bigKeysOfMove(ctx context.Context, conn cluster.Conn, v *View, set *slots.Set, m *Move, o BigKeyOptions) (int64, error) {
	c := conn.Client()
	defer c.Close()
	var sized, budget int64 = 0, o.PerMove
	list := set.Slots()
	for i := 0; i < len(list) && budget > 0; {
		// A round: slots until about bigKeyRound keys, within the budget.
		type ask struct {
			slot uint16
			keys int64
		}
		var round []ask
		var keys int64
		for ; i < len(list) && keys < bigKeyRound && budget > 0; i++ {
			s := list[i]
			if v.Keys[s] == 0 {
				continue
			}
			n := min(v.Keys[s], int64(o.PerSlot), budget)
			round = append(round, ask{s, n})
			keys += n
			budget -= n
		}
		if len(round) == 0 {
			break
		}
		cmds := make([]*redis.Cmd, len(round))
		_, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for j, a := range round {
				// EVAL, not EVALSHA after SCRIPT LOAD: a user may run
				// scripts without being allowed SCRIPT.
				cmds[j] = bigKeyScript.Eval(ctx, pl, nil, a.slot, a.keys, o.Bytes)
			}
			return nil
		})
		if err != nil {
			return sized, err
		}
		for j, cmd := range cmds {
			n, big, err := parseBigKeys(cmd, round[j].slot)
			if err != nil {
				return sized, err
			}
			sized += n
			m.BigKeys = append(m.BigKeys, big...)
		}
	}
	return sized, nil
}

// parseBigKeys reads one reply of bigKeyScript for slot s.
func parseBigKeys(cmd *redis.Cmd, s uint16) (int64, []BigKey, error) {
	bad := func() error { return fmt.Errorf("slot %d: unexpected reply %v", s, cmd.Val()) }
	top, ok := cmd.Val().([]any)
	if !ok || len(top) != 2 {
		return 0, nil, bad()
	}
	n, ok1 := top[0].(int64)
	flat, ok2 := top[1].([]any)
	if !ok1 || !ok2 || len(flat)%3 != 0 {
		return 0, nil, bad()
	}
	var out []BigKey
	for k := 0; k < len(flat); k += 3 {
		name, ok1 := flat[k].(string)
		bytes, ok2 := flat[k+1].(int64)
		typ, ok3 := flat[k+2].(string)
		if !ok1 || !ok2 || !ok3 {
			return 0, nil, bad()
		}
		out = append(out, BigKey{Key: name, Slot: s, Bytes: bytes, Type: typ})
	}
	return n, out, nil
}
