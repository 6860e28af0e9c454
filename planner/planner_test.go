package planner

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/slots"
)

// view builds a state of masters owning specs ("" for an empty master),
// named m0, m1… at 10.0.0.N:6379, with keys(slot) keys in each slot.
func view(t *testing.T, specs []string, keys func(s uint16) int64) *View {
	t.Helper()
	v := &View{Keys: make([]int64, slots.Count)}
	for i, spec := range specs {
		n := Node{ID: fmt.Sprintf("m%d", i), Addr: fmt.Sprintf("10.0.0.%d:6379", i), Master: true}
		if spec != "" {
			set, err := slots.Parse(spec)
			if err != nil {
				t.Fatal(err)
			}
			n.Slots = *set
		}
		v.Nodes = append(v.Nodes, n)
	}
	for s := range v.Keys {
		v.Keys[s] = keys(uint16(s))
	}
	return v
}

var three = []string{"0-5460", "5461-10922", "10923-16383"}

// uneven: m0's slots hold 2 keys each, the others' 1.
func uneven(s uint16) int64 {
	if s <= 5460 {
		return 2
	}
	return 1
}

// applyPlan returns each master's weight once p's moves are made (from
// the state, not from p.After), checking that every move takes slots
// its source owns at that point and that no slot moves twice.
func applyPlan(t *testing.T, v *View, p *Plan, w func(uint16) int64) map[string]int64 {
	t.Helper()
	owner := map[uint16]string{}
	for _, n := range v.Nodes {
		for _, s := range n.Slots.Slots() {
			owner[s] = n.ID
		}
	}
	moved := map[uint16]bool{}
	for _, m := range p.Moves {
		set, err := slots.Parse(m.Slots)
		if err != nil {
			t.Fatalf("move %+v: %v", m, err)
		}
		if set.Len() != m.SlotCount {
			t.Errorf("move %s→%s: slot_count %d, slots %s hold %d", m.Source, m.Target, m.SlotCount, m.Slots, set.Len())
		}
		var keys int64
		for _, s := range set.Slots() {
			if owner[s] != m.SourceID {
				t.Fatalf("move %s→%s takes slot %d, owned by %s", m.SourceID, m.TargetID, s, owner[s])
			}
			if moved[s] {
				t.Fatalf("slot %d moves twice", s)
			}
			moved[s] = true
			owner[s] = m.TargetID
			keys += v.Keys[s]
		}
		if keys != m.Keys {
			t.Errorf("move %s→%s: expected keys %d, its slots hold %d", m.SourceID, m.TargetID, m.Keys, keys)
		}
	}
	out := map[string]int64{}
	for _, n := range v.Nodes {
		out[n.ID] = 0
	}
	for s, id := range owner {
		out[id] += w(s)
	}
	return out
}

// within fails unless every listed master's weight is within frac of mean.
func within(t *testing.T, weights map[string]int64, ids []string, frac float64) {
	t.Helper()
	var sum int64
	for _, id := range ids {
		sum += weights[id]
	}
	mean := float64(sum) / float64(len(ids))
	for _, id := range ids {
		if d := float64(weights[id]) - mean; d > frac*mean || d < -frac*mean {
			t.Errorf("%s weighs %d, mean %.0f: off by %.1f%% (allowed %.1f%%); weights %v", id, weights[id], mean, 100*d/mean, 100*frac, weights)
		}
	}
}

func TestAddTakesAnEvenShareFromTheHeaviest(t *testing.T) {
	v := view(t, append(three, ""), uneven) // m0 10922 keys, m1 and m2 5461, m3 none
	p, err := Make(v, Request{Mode: Add, Nodes: []string{"10.0.0.3:6379"}})
	if err != nil {
		t.Fatal(err)
	}
	got := applyPlan(t, v, p, func(s uint16) int64 { return v.Keys[s] })
	within(t, got, []string{"m0", "m1", "m2", "m3"}, 0.01)
	// m0 holds twice the others: the new master's share (a quarter of
	// 21844) comes from m0 alone, in one contiguous range.
	if len(p.Moves) != 1 || p.Moves[0].SourceID != "m0" || p.Moves[0].TargetID != "m3" {
		t.Fatalf("moves %+v: want one from m0 to m3", p.Moves)
	}
	if strings.Contains(p.Moves[0].Slots, ",") {
		t.Errorf("move of %s: not one contiguous range", p.Moves[0].Slots)
	}
	if p.Before.Imbalance < 1.49 || p.After.Imbalance > 1.01 {
		t.Errorf("imbalance %.3f → %.3f, want 1.5 → 1.0", p.Before.Imbalance, p.After.Imbalance)
	}
	if p.After.Masters[3].Keys != p.Moves[0].Keys {
		t.Errorf("after: m3 holds %d keys, the move brings %d", p.After.Masters[3].Keys, p.Moves[0].Keys)
	}
}

func TestAddTwoNodesToAnEvenCluster(t *testing.T) {
	v := view(t, append(three, "", ""), func(uint16) int64 { return 3 })
	p, err := Make(v, Request{Mode: Add, Nodes: []string{"m3", "10.0.0.4:6379"}})
	if err != nil {
		t.Fatal(err)
	}
	got := applyPlan(t, v, p, func(s uint16) int64 { return v.Keys[s] })
	within(t, got, []string{"m0", "m1", "m2", "m3", "m4"}, 0.01)
	for _, m := range p.Moves {
		if m.TargetID != "m3" && m.TargetID != "m4" {
			t.Errorf("move %s→%s: only the new masters should receive", m.SourceID, m.TargetID)
		}
		// Contiguity: each move is one range.
		if strings.Contains(m.Slots, ",") {
			t.Errorf("move %s→%s of %s: not one range", m.SourceID, m.TargetID, m.Slots)
		}
	}
	// ... taken at an end of the source's: each keeps one range.
	if n := len(p.After.Masters); n != 5 {
		t.Fatalf("%d masters after", n)
	}
	for _, m := range p.After.Masters[:3] {
		var left slots.Set
		for _, n := range v.Nodes {
			if n.ID == m.ID {
				left = n.Slots
			}
		}
		for _, mv := range p.Moves {
			if mv.SourceID == m.ID {
				set, _ := slots.Parse(mv.Slots)
				left = minus(left, set)
			}
		}
		if r := left.Ranges(); len(r) != 1 || left.Len() != m.Slots {
			t.Errorf("%s keeps %s (%d slots, %d by the plan): not one range", m.ID, left.String(), left.Len(), m.Slots)
		}
	}
}

func minus(a slots.Set, b *slots.Set) slots.Set {
	var out slots.Set
	for _, s := range a.Slots() {
		if !b.Contains(s) {
			out.Add(s)
		}
	}
	return out
}

func TestDrainEmptiesTheMaster(t *testing.T) {
	// Empty slots too: every slot leaves, even those with no key.
	v := view(t, three, func(s uint16) int64 {
		if s%7 == 0 {
			return 0
		}
		return int64(s % 5)
	})
	p, err := Make(v, Request{Mode: Drain, Nodes: []string{"m1"}})
	if err != nil {
		t.Fatal(err)
	}
	got := applyPlan(t, v, p, func(s uint16) int64 { return v.Keys[s] })
	var left int
	for _, m := range p.After.Masters {
		if m.ID == "m1" {
			left = m.Slots
		}
	}
	if left != 0 || got["m1"] != 0 {
		t.Fatalf("m1 keeps %d slots, %d keys after the plan", left, got["m1"])
	}
	for _, m := range p.Moves {
		if m.SourceID != "m1" {
			t.Errorf("move %s→%s: only the drained master gives", m.SourceID, m.TargetID)
		}
	}
	within(t, got, []string{"m0", "m2"}, 0.01)
	if p.Partial {
		t.Errorf("plan partial: %v", p.Notes)
	}
}

func TestDrainWithOneMoveGivesEverythingToOne(t *testing.T) {
	v := view(t, three, func(uint16) int64 { return 1 })
	p, err := Make(v, Request{Mode: Drain, Nodes: []string{"m2"}, MaxMoves: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 1 || p.Moves[0].SlotCount != 5461 {
		t.Fatalf("moves %+v: want one of m2's 5461 slots", p.Moves)
	}
}

func TestRebalanceByKeysAndByMemory(t *testing.T) {
	// Same keys everywhere, but m2's keys are ten times bigger.
	v := view(t, three, func(uint16) int64 { return 2 })
	v.Bytes = make([]int64, slots.Count)
	for s := range v.Bytes {
		v.Bytes[s] = 200
		if s >= 10923 {
			v.Bytes[s] = 2000
		}
	}
	_, err := Make(v, Request{Mode: Rebalance})
	if !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("rebalance by keys of an even cluster: %v, want nothing to do", err)
	}
	p, err := Make(v, Request{Mode: Rebalance, By: ByMemory})
	if err != nil {
		t.Fatal(err)
	}
	got := applyPlan(t, v, p, func(s uint16) int64 { return v.Bytes[s] })
	within(t, got, []string{"m0", "m1", "m2"}, 0.01)
	for _, m := range p.Moves {
		if m.SourceID != "m2" {
			t.Errorf("move %s→%s: only the heaviest gives", m.SourceID, m.TargetID)
		}
		if m.Bytes != 2000*int64(m.SlotCount) {
			t.Errorf("move %s→%s: bytes %d for %d slots of 2000", m.SourceID, m.TargetID, m.Bytes, m.SlotCount)
		}
	}
	if p.After.Imbalance > 1.01 || p.Before.Imbalance < 2 {
		t.Errorf("imbalance %.3f → %.3f", p.Before.Imbalance, p.After.Imbalance)
	}
}

// By keys, a move's bytes are its source's dataset bytes times the move's
// share of the source's keys, and the plan says they are that estimate.
func TestBytesByKeysAreTheDatasetShare(t *testing.T) {
	v := view(t, append(three, ""), uneven)
	v.Nodes[0].Dataset = 3 << 30 // over m0's 10922 keys
	p, err := Make(v, Request{Mode: Add, Nodes: []string{"m3"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.BytesFrom != BytesDatasetShare {
		t.Errorf("bytes_from %q, want %q", p.BytesFrom, BytesDatasetShare)
	}
	for _, m := range p.Moves {
		want := float64(v.Nodes[0].Dataset) * float64(m.Keys) / 10922
		if m.SourceID == "m0" && math.Abs(float64(m.Bytes)-want) > 1 {
			t.Errorf("move %s→%s of %d keys: bytes %d, want %.0f (3 GiB × %d/10922)", m.SourceID, m.TargetID, m.Keys, m.Bytes, want, m.Keys)
		}
		if m.SourceID != "m0" && m.Bytes != 0 {
			t.Errorf("move %s→%s: bytes %d from a source of dataset 0", m.SourceID, m.TargetID, m.Bytes)
		}
	}
}

func TestRebalanceGivesToTheLightest(t *testing.T) {
	// m0 heavy, m1 even, m2 light: m0 gives to m2 only.
	v := view(t, three, func(s uint16) int64 {
		switch {
		case s <= 5460:
			return 4
		case s <= 10922:
			return 3
		}
		return 2
	})
	p, err := Make(v, Request{Mode: Rebalance})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 1 || p.Moves[0].SourceID != "m0" || p.Moves[0].TargetID != "m2" {
		t.Fatalf("moves %+v: want one from m0 to m2", p.Moves)
	}
	within(t, applyPlan(t, v, p, func(s uint16) int64 { return v.Keys[s] }), []string{"m0", "m1", "m2"}, 0.01)
}

func TestMaxMovesBoundsThePlan(t *testing.T) {
	v := view(t, append(three, "", ""), func(uint16) int64 { return 1 })
	full, err := Make(v, Request{Mode: Add, Nodes: []string{"m3", "m4"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Moves) < 3 {
		t.Fatalf("%d moves: want at least 3 for the bound to matter", len(full.Moves))
	}
	p, err := Make(v, Request{Mode: Add, Nodes: []string{"m3", "m4"}, MaxMoves: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 2 {
		t.Fatalf("%d moves with --max-moves 2", len(p.Moves))
	}
	if !p.Partial || p.After.Imbalance <= 1.02 {
		t.Errorf("partial %v, imbalance after %.3f: a bounded plan should say it stops short", p.Partial, p.After.Imbalance)
	}
	// Two moves cannot lower the heaviest of three donors, but they
	// bring the masters closer to their shares.
	if p.After.Imbalance > p.Before.Imbalance {
		t.Errorf("imbalance %.3f → %.3f: worse", p.Before.Imbalance, p.After.Imbalance)
	}
	got := applyPlan(t, v, p, func(s uint16) int64 { return v.Keys[s] })
	var before, after float64
	for _, n := range v.Nodes {
		before += math.Abs(float64(n.Slots.Len()) - slots.Count/5.0)
		after += math.Abs(float64(got[n.ID]) - slots.Count/5.0)
	}
	if after >= before/2 {
		t.Errorf("distance from an even share %.0f → %.0f: two moves should halve it at least", before, after)
	}
}

func TestBadInput(t *testing.T) {
	v := view(t, append(three, ""), uneven)
	v.Nodes = append(v.Nodes, Node{ID: "r0", Addr: "10.0.0.9:6379"}) // a replica
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Mode: Add, Nodes: []string{"10.0.0.7:6379"}}, "unknown node"},
		{Request{Mode: Add, Nodes: []string{"r0"}}, "not a master"},
		{Request{Mode: Add, Nodes: []string{"m1"}}, "already owns 5462 slots"},
		{Request{Mode: Add}, "needs at least one node"},
		{Request{Mode: Drain, Nodes: []string{"m3"}}, "owns no slots"},
		{Request{Mode: Drain, Nodes: []string{"m0", "m1", "m2"}}, "no master owning slots"},
		{Request{Mode: Rebalance, Nodes: []string{"m0"}}, "takes no nodes"},
		{Request{Mode: Rebalance, By: ByMemory}, "bytes of every slot"},
		{Request{Mode: Rebalance, By: "cpu"}, "unknown weight"},
		{Request{Mode: Add, Nodes: []string{"m3"}, MaxMoves: -1}, "max moves"},
	} {
		_, err := Make(v, c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.req, err, c.want)
		}
	}
	even := view(t, three, func(uint16) int64 { return 1 })
	if _, err := Make(even, Request{Mode: Rebalance}); !errors.Is(err, ErrNothingToDo) {
		t.Errorf("rebalance of an even cluster: %v, want nothing to do", err)
	}
	marked := view(t, append(three, ""), uneven)
	marked.Marks = []string{"slot 5 is migrating on 10.0.0.0:6379 to m3"}
	if _, err := Make(marked, Request{Mode: Add, Nodes: []string{"m3"}}); err == nil || !strings.Contains(err.Error(), "slot 5 is migrating") {
		t.Errorf("plan over a migrating slot: %v", err)
	}
}

func TestEmptyClusterSharesSlots(t *testing.T) {
	v := view(t, append(three, ""), func(uint16) int64 { return 0 })
	p, err := Make(v, Request{Mode: Add, Nodes: []string{"m3"}})
	if err != nil {
		t.Fatal(err)
	}
	got := applyPlan(t, v, p, func(uint16) int64 { return 1 })
	within(t, got, []string{"m0", "m1", "m2", "m3"}, 0.01)
}

// With one move allowed, it is the heaviest giving to the lightest.
func TestOneMoveGoesFromTheHeaviestToTheLightest(t *testing.T) {
	// m0 3 keys a slot, m1 4, m2 2; m3 and m4 empty; m4 named first.
	v := view(t, append(three, "", ""), func(s uint16) int64 {
		switch {
		case s <= 5460:
			return 3
		case s <= 10922:
			return 4
		}
		return 2
	})
	p, err := Make(v, Request{Mode: Add, Nodes: []string{"m4", "m3"}, MaxMoves: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 1 || p.Moves[0].SourceID != "m1" {
		t.Fatalf("moves %+v: want one from the heaviest, m1", p.Moves)
	}
	// Rebalance: m0 5 keys a slot, m1 2, m2 1: both m1 and m2 are
	// below the mean; m2 is the lightest.
	v = view(t, three, func(s uint16) int64 {
		switch {
		case s <= 5460:
			return 5
		case s <= 10922:
			return 2
		}
		return 1
	})
	p, err = Make(v, Request{Mode: Rebalance, MaxMoves: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 1 || p.Moves[0].SourceID != "m0" || p.Moves[0].TargetID != "m2" {
		t.Fatalf("moves %+v: want one from m0 to m2", p.Moves)
	}
}
