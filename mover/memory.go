package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/slots"
)

// headroomMargin is the share of a target's free memory under maxmemory
// that a move may plan to fill: the estimate is an average, and the
// target's buffers (replication, our pipeline) take room too.
const headroomMargin = 0.9

// checkHeadroom refuses a move whose keys would not fit under the target's
// maxmemory: a target over it evicts keys (or, with noeviction, refuses
// writes), and eviction answers no error to anyone. The size of the keys is
// estimated as the source's dataset memory times their share of its keys.
func checkHeadroom(ctx context.Context, source, target *redis.Client, set *slots.Set) error {
	tm, err := info.Read(ctx, target, "memory")
	if err != nil {
		return refuse("target: %w", err)
	}
	limit, _ := tm.Int("maxmemory")
	if limit == 0 {
		return nil
	}
	used, err := tm.Int("used_memory")
	if err != nil {
		return refuse("target %s: %w", target.Options().Addr, err)
	}
	need, moving, err := estimateBytes(ctx, source, set)
	if err != nil {
		return refuse("source %s: %w", source.Options().Addr, err)
	}
	free := max(limit-used, 0)
	if float64(need) > headroomMargin*float64(free) {
		return refuse("target %s has %s free under its maxmemory of %s (policy %s), and the %d keys of slots %s take about %s on the source: "+
			"the target would evict keys or refuse writes. Give it room (maxmemory, or move fewer slots), or pass --allow-eviction to move anyway "+
			"(a move still stops and rolls back if the target evicts anything)",
			target.Options().Addr, mib(free), mib(limit), tm["maxmemory_policy"], moving, set, mib(need))
	}
	return nil
}

// estimateBytes is the source's dataset memory times the chosen slots'
// share of its keys, and the number of those keys.
func estimateBytes(ctx context.Context, source *redis.Client, set *slots.Set) (bytes, keys int64, err error) {
	counts, err := cluster.CountKeys(ctx, source, set.Slots())
	if err != nil {
		return 0, 0, err
	}
	for _, n := range counts {
		keys += n
	}
	total, err := source.DBSize(ctx).Result()
	if err != nil || total == 0 || keys == 0 {
		return 0, keys, err
	}
	sm, err := info.Read(ctx, source, "memory")
	if err != nil {
		return 0, keys, err
	}
	dataset, err := sm.Int("used_memory_dataset")
	if err != nil {
		return 0, keys, err
	}
	return int64(float64(dataset) * float64(keys) / float64(total)), keys, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// ErrTargetEvicted stops a move whose target evicted keys: they are gone
// without an error to anyone, so nothing proves the copy whole.
var ErrTargetEvicted = errors.New("the target evicted keys during the move (maxmemory)")

// evictions reads the target's count of evicted keys.
func evictions(ctx context.Context, target *redis.Client) (int64, error) {
	st, err := info.Read(ctx, target, "stats")
	if err != nil {
		return 0, err
	}
	return st.Int("evicted_keys")
}

// noNewEvictions fails once the target's count of evicted keys is past since.
func noNewEvictions(ctx context.Context, target *redis.Client, since int64) error {
	n, err := evictions(ctx, target)
	if err != nil {
		return err
	}
	if n > since {
		return fmt.Errorf("%w: %d keys evicted on %s since the move began", ErrTargetEvicted, n-since, target.Options().Addr)
	}
	return nil
}
