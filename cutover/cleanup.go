package cutover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/slots"
)

// Pace bounds how hard key removal leans on a node: at most Batch keys
// UNLINKed per round trip, and a Sleep between round trips so that its
// other clients keep their latency.
type Pace struct {
	Batch int
	Sleep time.Duration
	// Gate, if set, holds each batch (see package throttle).
	Gate interface{ Wait(context.Context) error }
}

// DefaultBatch was measured with 333k orphans of 512 B on the source and a
// PING probe: 2000 keys and 1 ms sleeps removed them in 1.1 s with the
// probe's p99 at 3.2 ms (2.6 ms before the move); 500 took 2.5 s for no
// better latency, 5000 brought the p99 to 5.2 ms.
const DefaultBatch = 2000

func (p Pace) batch() int {
	if p.Batch <= 0 {
		return DefaultBatch
	}
	return p.Batch
}

// groupSize is how many slots are handled per round trip: the slots of a
// big range are many, their keys often few.
const groupSize = 64

// ErrNowReplica means the node turned into a replica (replica migration after
// its last slot went away): it resyncs from its new master, so it keeps no orphans.
var ErrNowReplica = errors.New("node is now a replica")

// Cleanup removes the orphaned keys of the moved slots from the source. A
// source left with no other key is flushed at once (FLUSHDB ASYNC). Else,
// slot by slot: CLUSTER SETSLOT <s> IMPORTING <the source itself>, so that
// ASKING lets it touch slots it no longer owns, UNLINK in paced batches from
// CLUSTER GETKEYSINSLOT, then CLUSTER SETSLOT <s> STABLE; in groups of 64
// slots, so that a crash leaves few marks behind. It returns the number of
// keys removed.
//
// The marks name the source, not the new owner: Valkey 8 lets a primary
// that imports a slot from a node take the slot over (bumping its epoch) as
// soon as a message from that node does not claim it, and a message the
// new owner sent before its claim may still be on its way. The owner would
// then lose the slot, and delete its keys of it, to a source that is
// purging them. A node never processes a message of its own.
//
// owner is the node ID of the slots' owner: the source is told of it first
// where its own view has them unassigned (see seeOwner).
func Cleanup(ctx context.Context, source *redis.Client, owner string, set *slots.Set, pace Pace) (int64, error) {
	if err := stillMaster(ctx, source); err != nil {
		return 0, err
	}
	if n, flushed, err := flushIfOnly(ctx, source, set); flushed || err != nil {
		return n, err
	}
	if err := checkUnlinkScript(ctx, source); err != nil {
		return 0, err
	}
	top, err := cluster.Load(ctx, source)
	if err != nil {
		return 0, err
	}
	self := top.Myself.ID
	if err := seeOwner(ctx, source, top, owner, set); err != nil {
		return 0, err
	}
	var removed int64
	all := set.Slots()
	for start := 0; start < len(all); start += groupSize {
		if err := stillMaster(ctx, source); err != nil {
			return removed, err
		}
		group, err := withKeys(ctx, source, all[start:min(start+groupSize, len(all))])
		if err != nil || len(group) == 0 {
			if err != nil {
				return removed, err
			}
			continue
		}
		if err := SetSlots(ctx, source, group, "IMPORTING", self); err != nil {
			return removed, err
		}
		n, err := purge(ctx, source, group, pace)
		removed += n
		if err != nil {
			// The marks go even so: the keys left are orphans that fix
			// removes later, but a mark left behind would make fix and the
			// next move of the slots refuse them.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if serr := SetSlots(sctx, source, group, "STABLE"); serr != nil {
				err = errors.Join(err, fmt.Errorf("and the importing marks stay on %s: %w", source.Options().Addr, serr))
			}
			cancel()
			return removed, err
		}
		if err := SetSlots(ctx, source, group, "STABLE"); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// seeOwner tells the source the owner of the slots its own view (view) has
// unassigned, as after a guarded release (Valkey 8) whose news has yet to
// reach it. A mark on such a slot does not last the purge: the owner's
// claim, when it comes by gossip, clears it (Redis 7.0 and Valkey 8 alike),
// and the purge fails ("non local key"). Slots its view gives to any node
// are left as they are.
func seeOwner(ctx context.Context, source *redis.Client, view *cluster.Topology, owner string, set *slots.Set) error {
	var unassigned []uint16
	for _, s := range set.Slots() {
		if view.AssignedTo(s) == nil {
			unassigned = append(unassigned, s)
		}
	}
	if err := SetSlots(ctx, source, unassigned, "NODE", owner); err != nil {
		return fmt.Errorf("telling the source the owner of slots it sees unassigned: %w", err)
	}
	return nil
}

// Rollback undoes the target side of a move that failed before the source
// released the slots: every key of the slots is removed from the target (at
// once if it holds no other key, else paced) and the slots set STABLE there.
// The source never changed. Slots the target owns by now (another move of
// them finished) hold live keys: they are left alone, and an error says so.
func Rollback(ctx context.Context, target *redis.Client, set *slots.Set, pace Pace) (int64, error) {
	top, err := cluster.Load(ctx, target)
	if err != nil {
		return 0, err
	}
	mine, owned := slots.NewSet(), slots.NewSet()
	for _, s := range set.Slots() {
		if top.Myself.Slots.Contains(s) {
			owned.Add(s)
		} else {
			mine.Add(s)
		}
	}
	removed, err := rollback(ctx, target, mine, pace)
	if err == nil && owned.Len() > 0 {
		err = fmt.Errorf("the target %s owns slots %s by now (another move of them finished?): their keys are live and were left alone", target.Options().Addr, owned)
	}
	return removed, err
}

func rollback(ctx context.Context, target *redis.Client, set *slots.Set, pace Pace) (int64, error) {
	if set.Len() == 0 {
		return 0, nil
	}
	if n, flushed, err := flushIfOnly(ctx, target, set); err != nil {
		return n, err
	} else if flushed {
		return n, SetSlots(ctx, target, set.Slots(), "STABLE")
	}
	if err := checkUnlinkScript(ctx, target); err != nil {
		return 0, err
	}
	var removed int64
	all := set.Slots()
	for start := 0; start < len(all); start += groupSize {
		group, err := withKeys(ctx, target, all[start:min(start+groupSize, len(all))])
		if err != nil {
			return removed, err
		}
		n, err := purge(ctx, target, group, pace)
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, SetSlots(ctx, target, all, "STABLE")
}

// flushScript empties the node with FLUSHDB ASYNC if every key it holds is
// in the slot ranges given as ARGV (first, last, …), and returns how many
// there were; else it returns -1 and changes nothing. Counting and flushing
// in one script leaves no moment for a key of another slot to slip in.
var flushScript = redis.NewScript(`local n = 0
for i = 1, #ARGV, 2 do
  for s = tonumber(ARGV[i]), tonumber(ARGV[i+1]) do
    n = n + redis.call('CLUSTER', 'COUNTKEYSINSLOT', s)
  end
end
if n ~= redis.call('DBSIZE') then return -1 end
redis.call('FLUSHDB', 'ASYNC')
return n`)

// flushIfOnly removes every key of set from c at once when c holds no other
// key, as a source that gave away all its slots, or a fresh target, does:
// its background thread frees them, where paced UNLINKs of a whole shard
// take a second per 300k keys. flushed is false when c holds other keys,
// or when another move has a connection on c: its replica link would see
// the FLUSHDB in the stream and give up.
func flushIfOnly(ctx context.Context, c *redis.Client, set *slots.Set) (removed int64, flushed bool, err error) {
	tasks, err := cluster.MoveTasks(ctx, c)
	if err != nil {
		return 0, false, err
	}
	own, _ := strings.CutPrefix(c.Options().ClientName, cluster.NamePrefix)
	if slices.ContainsFunc(tasks, func(t string) bool { return t != own }) {
		return 0, false, nil
	}
	var args []any
	for _, r := range set.Ranges() {
		args = append(args, r.Start, r.End)
	}
	var n int64
	err = cluster.WhileDown(ctx, func() (err error) {
		n, err = flushScript.Eval(ctx, c, nil, args...).Int64() // not Run: see markScript
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("count-and-flush script on %s: %w", c.Options().Addr, err)
	}
	return n, n >= 0, nil
}

// withKeys returns the slots of group that hold keys on c.
func withKeys(ctx context.Context, c *redis.Client, group []uint16) ([]uint16, error) {
	counts, err := cluster.CountKeys(ctx, c, group)
	if err != nil {
		return nil, err
	}
	var out []uint16
	for i, n := range counts {
		if n > 0 {
			out = append(out, group[i])
		}
	}
	return out, nil
}

// purge UNLINKs every key of the slots, each batch behind ASKING (the node
// only has the slots importing), about pace.Batch keys per round trip.
func purge(ctx context.Context, c *redis.Client, group []uint16, pace Pace) (int64, error) {
	var removed int64
	idle := 0 // rounds that removed nothing: expired keys go that way, but not forever
	for len(group) > 0 {
		if pace.Gate != nil {
			if err := pace.Gate.Wait(ctx); err != nil {
				return removed, err
			}
		}
		per := max(1, pace.batch()/len(group))
		lists := make([]*redis.StringSliceCmd, len(group))
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range group {
				lists[i] = p.ClusterGetKeysInSlot(ctx, int(s), per)
			}
			return nil
		})
		if err != nil {
			return removed, fmt.Errorf("CLUSTER GETKEYSINSLOT on %s: %w", c.Options().Addr, err)
		}
		var batches [][]string
		next := group[:0:0]
		for i, l := range lists {
			if keys := l.Val(); len(keys) > 0 {
				batches = append(batches, keys)
				next = append(next, group[i])
			}
		}
		var n int64
		err = cluster.WhileDown(ctx, func() (err error) {
			n, err = unlink(ctx, c, batches)
			return err
		})
		if err != nil {
			return removed, err
		}
		removed += n
		if n > 0 {
			idle = 0
		} else if idle++; idle > 3 && len(next) > 0 {
			return removed, fmt.Errorf("UNLINK removes nothing of slots %v on %s", next, c.Options().Addr)
		}
		group = next
		if pace.Sleep > 0 && len(group) > 0 {
			select {
			case <-ctx.Done():
				return removed, ctx.Err()
			case <-time.After(pace.Sleep):
			}
		}
	}
	return removed, nil
}

// unlinkScript removes the keys given as arguments, one UNLINK each. On an
// importing slot, a command naming several keys is refused with TRYAGAIN
// if one of them is gone (expired since GETKEYSINSLOT listed it); single-key
// commands inside a script that declares no key are not, and the script
// inherits the caller's ASKING.
var unlinkScript = redis.NewScript(`local n = 0
for _, k in ipairs(ARGV) do n = n + redis.call('UNLINK', k) end
return n`)

// checkUnlinkScript runs the script on nothing before any slot is marked,
// so that a node that refuses it (EVAL not allowed) is left untouched.
// EVAL, not EVALSHA after SCRIPT LOAD: a user may run scripts without
// being allowed SCRIPT.
func checkUnlinkScript(ctx context.Context, c *redis.Client) error {
	if err := unlinkScript.Eval(ctx, c, nil).Err(); err != nil {
		return fmt.Errorf("EVAL on %s: %w", c.Options().Addr, err)
	}
	return nil
}

// unlink removes each batch of keys (one slot's) in one round trip.
func unlink(ctx context.Context, c *redis.Client, batches [][]string) (int64, error) {
	counts := make([]*redis.Cmd, len(batches))
	c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, keys := range batches {
			args := make([]any, len(keys))
			for j, k := range keys {
				args[j] = k
			}
			p.Do(ctx, "ASKING")
			counts[i] = unlinkScript.Eval(ctx, p, nil, args...)
		}
		return nil
	})
	var n int64
	for i, cmd := range counts {
		v, err := cmd.Int64()
		if err != nil {
			return n, fmt.Errorf("UNLINK of %d orphaned keys (%q…) on %s: %w", len(batches[i]), batches[i][0], c.Options().Addr, err)
		}
		n += v
	}
	return n, nil
}

// stillMaster returns ErrNowReplica if c has turned into a replica.
func stillMaster(ctx context.Context, c *redis.Client) error {
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return fmt.Errorf("ROLE on %s: %w", c.Options().Addr, err)
	}
	if len(role) > 0 && role[0] == "slave" {
		return ErrNowReplica
	}
	return nil
}
