package cutover

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/info"
)

// WaitReplicas waits until every online replica of the target has
// acknowledged the target's replication offset as it is now: the keys of a
// move exist nowhere else once the source's copies are deleted, and a
// failover of the target to a replica that trails (an import is a burst)
// would lose them. It returns how many replicas it waited for; after
// timeout, an error naming those that trail and by how much.
func WaitReplicas(ctx context.Context, target *redis.Client, timeout time.Duration) (int, error) {
	f, err := info.Read(ctx, target, "replication")
	if err != nil {
		return 0, err
	}
	want, err := f.Int("master_repl_offset")
	if err != nil {
		return 0, fmt.Errorf("on %s: %w", target.Options().Addr, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		trailing, online := trailingReplicas(f, want)
		if len(trailing) == 0 {
			return online, nil
		}
		if time.Now().After(deadline) {
			return online, fmt.Errorf("replicas of target %s trail its offset %d after %s: %s", target.Options().Addr, want, timeout, strings.Join(trailing, "; "))
		}
		select {
		case <-ctx.Done():
			return online, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if f, err = info.Read(ctx, target, "replication"); err != nil {
			return online, err
		}
	}
}

// trailingReplicas lists the online replicas in INFO replication whose
// acknowledged offset is below want, and counts the online ones.
func trailingReplicas(f info.Fields, want int64) (trailing []string, online int) {
	n, _ := f.Int("connected_slaves")
	for i := range n {
		r := f.Sub("slave" + strconv.FormatInt(i, 10))
		if r["state"] != "online" {
			continue
		}
		online++
		if off, _ := strconv.ParseInt(r["offset"], 10, 64); off < want {
			trailing = append(trailing, fmt.Sprintf("%s:%s at %d (%d bytes behind)", r["ip"], r["port"], off, want-off))
		}
	}
	return trailing, online
}
