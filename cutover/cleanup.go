package cutover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
)

// Pace bounds how hard key removal leans on a node: at most Batch keys per
// UNLINK, and a Sleep between batches so its other clients keep their latency.
type Pace struct {
	Batch int
	Sleep time.Duration
}

func (p Pace) batch() int {
	if p.Batch <= 0 {
		return 500
	}
	return p.Batch
}

// ErrNowReplica means the node turned into a replica (replica migration after
// its last slot went away): it resyncs from its new master, so it keeps no orphans.
var ErrNowReplica = errors.New("node is now a replica")

// Cleanup removes the orphaned keys of the moved slots from the source, slot
// by slot: CLUSTER SETSLOT <s> IMPORTING <target>, so that ASKING lets it
// touch a slot it no longer owns, UNLINK in paced batches from
// CLUSTER GETKEYSINSLOT, then CLUSTER SETSLOT <s> STABLE. It returns the
// number of keys removed.
func Cleanup(ctx context.Context, source *redis.Client, targetID string, set *slots.Set, pace Pace) (int64, error) {
	var removed int64
	for _, s := range set.Slots() {
		if replica, err := isReplica(ctx, source); err != nil {
			return removed, err
		} else if replica {
			return removed, ErrNowReplica
		}
		n, err := countKeys(ctx, source, s)
		if err != nil {
			return removed, err
		}
		if n == 0 {
			continue
		}
		if err := source.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", targetID).Err(); err != nil {
			return removed, fmt.Errorf("CLUSTER SETSLOT %d IMPORTING on source %s: %w", s, source.Options().Addr, err)
		}
		k, err := purgeSlot(ctx, source, s, pace)
		removed += k
		if err != nil {
			return removed, err
		}
		if err := source.Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE").Err(); err != nil {
			return removed, fmt.Errorf("CLUSTER SETSLOT %d STABLE on source %s: %w", s, source.Options().Addr, err)
		}
	}
	return removed, nil
}

// Rollback undoes the target side of a move that failed before the source
// released the slots: every key of the slots is removed from the target and
// the slots set STABLE there. The source never changed.
func Rollback(ctx context.Context, target *redis.Client, set *slots.Set, pace Pace) (int64, error) {
	var removed int64
	for _, s := range set.Slots() {
		k, err := purgeSlot(ctx, target, s, pace)
		removed += k
		if err != nil {
			return removed, err
		}
	}
	cmds, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range set.Slots() {
			p.Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE")
		}
		return nil
	})
	if err != nil {
		for _, c := range cmds {
			if c.Err() != nil {
				return removed, fmt.Errorf("%s on target %s: %w", c.String(), target.Options().Addr, c.Err())
			}
		}
		return removed, err
	}
	return removed, nil
}

// purgeSlot UNLINKs every key of slot s, in paced batches, each behind ASKING
// (the node does not own the slot, it only has it importing).
func purgeSlot(ctx context.Context, c *redis.Client, s uint16, pace Pace) (int64, error) {
	var removed int64
	idle := 0 // batches that removed nothing: expired keys go that way, but not forever
	for {
		keys, err := c.ClusterGetKeysInSlot(ctx, int(s), pace.batch()).Result()
		if err != nil {
			return removed, fmt.Errorf("CLUSTER GETKEYSINSLOT %d on %s: %w", s, c.Options().Addr, err)
		}
		if len(keys) == 0 {
			return removed, nil
		}
		var unlink *redis.IntCmd
		_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			unlink = p.Unlink(ctx, keys...)
			return nil
		})
		if err != nil {
			return removed, fmt.Errorf("UNLINK %d keys of slot %d on %s: %w", len(keys), s, c.Options().Addr, err)
		}
		removed += unlink.Val()
		if unlink.Val() > 0 {
			idle = 0
		} else if idle++; idle > 3 {
			return removed, fmt.Errorf("UNLINK removes nothing of slot %d on %s (first key %q)", s, c.Options().Addr, keys[0])
		}
		if pace.Sleep > 0 {
			select {
			case <-ctx.Done():
				return removed, ctx.Err()
			case <-time.After(pace.Sleep):
			}
		}
	}
}

func countKeys(ctx context.Context, c *redis.Client, s uint16) (int64, error) {
	n, err := c.ClusterCountKeysInSlot(ctx, int(s)).Result()
	if err != nil {
		return 0, fmt.Errorf("CLUSTER COUNTKEYSINSLOT %d on %s: %w", s, c.Options().Addr, err)
	}
	return n, nil
}

func isReplica(ctx context.Context, c *redis.Client) (bool, error) {
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return false, fmt.Errorf("ROLE on %s: %w", c.Options().Addr, err)
	}
	return len(role) > 0 && role[0] == "slave", nil
}
