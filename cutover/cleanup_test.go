package cutover

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// Keys of an importing slot that expired after CLUSTER GETKEYSINSLOT listed
// them make a multi-key UNLINK fail with TRYAGAIN; the purge must still
// remove every key.
func TestPurgeSurvivesExpiredKeys(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-16383", ""}, harness.Options{})
	node := c.Nodes[1].Client()
	defer node.Close()
	const slot = 100
	tag := ""
	for i := 0; tag == ""; i++ {
		if slots.ForString(fmt.Sprint(i)) == slot {
			tag = fmt.Sprint(i)
		}
	}
	// Expired keys stay in the keyspace until something looks at them.
	if err := node.Do(ctx, "DEBUG", "SET-ACTIVE-EXPIRE", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.IDs[0]).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 50; i++ {
			ttl := time.Duration(0)
			if i%5 == 0 {
				ttl = time.Millisecond
			}
			p.Do(ctx, "ASKING")
			p.Set(ctx, fmt.Sprintf("{%s}:%d", tag, i), "v", ttl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	removed, err := Rollback(ctx, node, slots.NewSet(slots.Range{Start: slot, End: slot}), Pace{Batch: 100})
	if err != nil {
		t.Fatalf("rollback: %v (removed %d)", err, removed)
	}
	if n := node.ClusterCountKeysInSlot(ctx, slot).Val(); n != 0 || removed != 40 {
		t.Fatalf("%d keys left in the slot, %d removed (want 0 and the 40 that had not expired)", n, removed)
	}
	// Nor may it leave TRYAGAIN in the operator's error statistics.
	if stats := node.Info(ctx, "errorstats").Val(); strings.Contains(stats, "TRYAGAIN") {
		t.Fatalf("the purge drew TRYAGAIN errors:\n%s", stats)
	}
}
