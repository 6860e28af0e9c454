package mover

import (
	"context"
	"testing"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// The importing marks go on all at once or not at all: a slot migrating or
// importing already (another move of it) refuses the whole set.
func TestMarkScriptAllOrNothing(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	target := c.Nodes[1].Client()
	defer target.Close()
	source, targetID := c.IDs[0], c.IDs[1]
	mark := func(from, to int) int64 {
		args := []any{source}
		for s := from; s <= to; s++ {
			args = append(args, s)
		}
		busy, err := markScript.Run(ctx, target, nil, args...).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return busy
	}
	importing := func() map[uint16]string {
		top, err := cluster.Load(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		return top.Myself.Importing
	}

	if err := target.Do(ctx, "CLUSTER", "SETSLOT", 150, "IMPORTING", source).Err(); err != nil {
		t.Fatal(err)
	}
	if busy := mark(100, 200); busy != 150 {
		t.Fatalf("over an importing slot: %d, want slot 150 named", busy)
	}
	if got := importing(); len(got) != 1 {
		t.Fatalf("a refused mark changed the target: importing %v", got)
	}
	if busy := mark(151, 300); busy != -1 {
		t.Fatalf("marks on free slots refused for slot %d", busy)
	}
	if got := importing(); len(got) != 151 || got[151] != source || got[300] != source {
		t.Fatalf("importing %d slots (151..300 and 150 wanted)", len(got))
	}
	// A migrating slot counts too (seen from the source's side here).
	src := c.Nodes[0].Client()
	defer src.Close()
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", 5000, "MIGRATING", targetID).Err(); err != nil {
		t.Fatal(err)
	}
	args := []any{targetID, 4999, 5000}
	if busy, err := markScript.Run(ctx, src, nil, args...).Int64(); err != nil || busy != 5000 {
		t.Fatalf("over a migrating slot: %d, %v", busy, err)
	}
}
