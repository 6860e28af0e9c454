package main

import (
	"testing"

	"github.com/slotmover/slotmover/planner"
)

// Two moves run at once only if they touch no node in two roles and,
// under a budget, load no target twice.
func TestApplyConflicts(t *testing.T) {
	move := func(src, dst string) planner.Move { return planner.Move{SourceID: src, TargetID: dst} }
	for _, tc := range []struct {
		running, next planner.Move
		budgeted      bool
		want          bool
	}{
		{move("a", "x"), move("b", "y"), true, false},
		{move("a", "x"), move("a", "y"), true, true},   // one source
		{move("a", "x"), move("x", "y"), true, true},   // the running move's target is the source
		{move("a", "x"), move("b", "a"), true, true},   // the running move's source is the target
		{move("a", "x"), move("b", "x"), true, true},   // one target, under a budget
		{move("a", "x"), move("b", "x"), false, false}, // one target, budget off
		{move("a", "x"), move("a", "y"), false, true},
	} {
		if got := conflict(tc.running, tc.next, tc.budgeted); got != tc.want {
			t.Errorf("%s→%s running, %s→%s next, budgeted %v: conflict %v, want %v",
				tc.running.SourceID, tc.running.TargetID, tc.next.SourceID, tc.next.TargetID, tc.budgeted, got, tc.want)
		}
	}
}
