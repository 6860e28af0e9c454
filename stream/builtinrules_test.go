package stream

import (
	"context"
	"slices"
	"testing"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// TestSortStoreDestinationNamedLikeOption runs SORT for real: the key after
// STORE is the destination even when it reads like an option, which
// COMMAND GETKEYS gets wrong and Classify gets right.
func TestSortStoreDestinationNamedLikeOption(t *testing.T) {
	ctx := context.Background()
	s := harness.ServerT(t, localcluster.Options{})
	c := s.Client()
	defer c.Close()
	tbl, err := LoadKeyTable(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"SORT", "k", "STORE", "store", "LIMIT", "0", "1"}
	if err := c.RPush(ctx, "k", 3, 1, 2).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := []any{}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	if err := c.Do(ctx, cmd...).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "store").Result(); err != nil || n != 1 {
		t.Fatalf("SORT did not write the key %q: %v %v", "store", n, err)
	}
	_, keys, _ := tbl.Classify(keyArgs(args...), nil)
	if got := keyNamesAt(args, keys); !slices.Equal(got, []string{"k", "store"}) {
		t.Errorf("keys %q, want [k store]", got)
	}
	// 7.0.15 answers [k LIMIT]; logged, not asserted, in case a release fixes it.
	if want, err := serverGetKeys(ctx, c, args); err == nil {
		t.Logf("COMMAND GETKEYS says %q", want)
	}
}
