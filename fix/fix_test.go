package fix

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/slots"
)

// cl is a cluster of masters a, b, c (and more if named in owners) as one
// of them sees it.
type cl struct {
	owners map[string]string // node → its slot fields in this view
	flags  map[string]string // node → extra flags in this view ("fail", "fail?")
}

// view builds me's CLUSTER NODES; marks go on its own line.
func view(t *testing.T, me string, c cl, marks string) *cluster.Topology {
	t.Helper()
	ids := []string{"a", "b", "c"}
	for id := range c.owners {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var lines []string
	for i, id := range ids {
		flags := "master"
		if id == me {
			flags = "myself,master"
		}
		if f := c.flags[id]; f != "" {
			flags += "," + f
		}
		line := fmt.Sprintf("%s 127.0.0.1:%d@1%d %s - 0 0 %d connected %s", id, 7000+i, 7000+i, flags, i+1, c.owners[id])
		if id == me {
			line += " " + marks
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	top, err := cluster.Parse(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func st(t *testing.T, me string, c cl, marks string, keys map[uint16]int64) *NodeState {
	top := view(t, me, c, marks)
	return &NodeState{Addr: top.Myself.Addr, Top: top, Keys: keys}
}

func down(addr string) *NodeState {
	return &NodeState{Addr: addr, Err: errors.New("connection refused")}
}

// keysIn gives n keys to every slot of spec.
func keysIn(spec string, n int64) map[uint16]int64 {
	m := map[uint16]int64{}
	for _, part := range strings.Fields(spec) {
		set, err := slots.Parse(part)
		if err != nil {
			panic(err)
		}
		for _, s := range set.Slots() {
			m[s] = n
		}
	}
	return m
}

func merge(ms ...map[uint16]int64) map[uint16]int64 {
	out := map[uint16]int64{}
	for _, m := range ms {
		for s, n := range m {
			out[s] += n
		}
	}
	return out
}

func summary(p Plan) string {
	var got []string
	for _, r := range p.Repairs {
		got = append(got, strings.TrimSpace(fmt.Sprintf("%s %s %s %s%s%s", r.Kind, r.NodeID, r.Slots, r.Owner, r.Target, r.Source)))
	}
	return strings.Join(got, "\n")
}

func expect(t *testing.T, p Plan, want ...string) {
	t.Helper()
	if got := summary(p); got != strings.Join(want, "\n") {
		t.Fatalf("repairs:\n%s\nwant:\n%s\nnotes: %q\nrefused: %q", got, strings.Join(want, "\n"), p.Notes, p.Refused)
	}
}

func noteWith(t *testing.T, notes []string, parts ...string) {
	t.Helper()
	for _, n := range notes {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(n, p)
		}
		if ok {
			return
		}
	}
	t.Fatalf("no note with %q in %q", parts, notes)
}

// Every state a move can stop in, at once on three masters a, b, c:
// slots 0-9 were being imported by b (stopped in the snapshot), 10-19
// released by a to b but not claimed, 20-29 moved from a to b with a's
// cleanup stopped half-way (marks on), 40 moved from a to c with no cleanup
// at all, and 30 is a legacy migration from a to c.
func TestPlanRepairs(t *testing.T) {
	others := cl{owners: map[string]string{"a": "0-19 30-39 41-4999", "b": "20-29 5000-9999", "c": "40 10000-16383"}}
	states := map[string]*NodeState{
		// a released 10-19 to b: in its own view b owns them.
		"a": st(t, "a", cl{owners: map[string]string{"a": "0-9 30-39 41-4999", "b": "10-29 5000-9999", "c": "40 10000-16383"}},
			"[20-<-b] [21-<-b] [30->-c]", merge(keysIn("0-9 30-39 41-4999", 2), map[uint16]int64{10: 3, 11: 1, 20: 5, 40: 2})),
		"b": st(t, "b", others, "[5-<-a] [10-<-a] [11-<-a]", merge(keysIn("20-29 5000-9999", 1), map[uint16]int64{5: 7, 10: 3, 11: 1})),
		"c": st(t, "c", others, "[30-<-a]", merge(keysIn("40 10000-16383", 1), map[uint16]int64{30: 4})),
	}
	p := PlanRepairs(states, nil)
	expect(t, p,
		"give-back a 10-11 b", // a released them to b, which never claimed them: back to a first
		"rollback a 20-21 b",  // a's cleanup marks (b owns): purge, clear
		"cleanup a 40 c",      // orphans of a finished move without cleanup
		"rollback b 5 a",      // b's import that a never released
	)
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "slot 30 migrating") || len(p.Refused) != 0 {
		t.Fatalf("notes: %q, refused %q", p.Notes, p.Refused)
	}
	// --slots narrows the plan.
	expect(t, PlanRepairs(states, slots.NewSet(slots.Range{Start: 0, End: 10})), "give-back a 10 b", "rollback b 5 a")

	// Nothing half-done: nothing to do.
	clean := map[string]*NodeState{
		"a": st(t, "a", others, "", keysIn("0-19", 1)),
		"b": st(t, "b", others, "", keysIn("20-29", 1)),
	}
	if p := PlanRepairs(clean, nil); len(p.Repairs)+len(p.Notes)+len(p.Refused) != 0 {
		t.Fatalf("a clean cluster: %+v", p)
	}
}

// A move stopped between release and claim is given back to the source,
// the only node sure to hold every write (the target may lack those made
// after the fence when the write pause did not hold): whether the source's
// view names the target as owner (Redis 6.2/7.x: DELSLOTS + SETSLOT NODE)
// or leaves the slots unassigned (Valkey 8: DELSLOTS alone). The source's
// keys are never removed; copies elsewhere go once it owns the slots again.
func TestPlanGivesReleasedSlotsBack(t *testing.T) {
	told := cl{owners: map[string]string{"a": "0-5460", "b": "5461-10922", "c": "10923-16383"}}
	for name, released := range map[string]string{
		"7.x":      "5461-10922 0-99", // b owns 0-99 in a's view
		"delslots": "5461-10922",      // unassigned in a's view
	} {
		t.Run(name, func(t *testing.T) {
			av := cl{owners: map[string]string{"a": "100-5460", "b": released, "c": "10923-16383"}}
			states := map[string]*NodeState{
				"a": st(t, "a", av, "", keysIn("0-5460", 3)),
				"b": st(t, "b", told, "[0-<-a] [1-<-a] [2-<-a]", merge(keysIn("5461-10922", 1), keysIn("0-2", 2))),
				"c": st(t, "c", told, "", merge(keysIn("10923-16383", 1), map[uint16]int64{1: 1})), // a stray copy on c
			}
			p := PlanRepairs(states, nil)
			expect(t, p, "give-back a 0-2 b", "cleanup c 1 a")
			if len(p.Refused) != 0 {
				t.Fatalf("refused: %q", p.Refused)
			}
			// Slots 3-99 were released but nobody imports them: nobody
			// claims them, so a's keys of them stay, with a note.
			noteWith(t, p.Notes, "127.0.0.1:7000 holds 291 keys of slots 3-99", "no reachable master claims")

			// A source that holds none of the keys the target holds (lost
			// its data?) gets nothing back, and the target keeps its copy.
			states["a"].Keys = keysIn("3-5460", 3)
			p = PlanRepairs(states, nil)
			expect(t, p)
			noteWith(t, p.Notes, "released slots 0-2 to 127.0.0.1:7001", "holds none of their keys")

			// A third master that names the target as owner saw a claim:
			// nothing is given back.
			states["a"].Keys = keysIn("0-5460", 3)
			states["c"] = st(t, "c", cl{owners: map[string]string{"a": "3-5460", "b": "0-2 5461-10922", "c": "10923-16383"}}, "", keysIn("10923-16383", 1))
			p = PlanRepairs(states, nil)
			expect(t, p)
			noteWith(t, p.Notes, "127.0.0.1:7002 sees 127.0.0.1:7001 as their owner")
		})
	}
}

// Where the source's release is guarded (Valkey 8), the target had every
// write before the source released, and takes the slots over by gossip by
// itself: a give-back would race that, so fix makes the claim, and the
// source's keys (and stray copies) go once the target owns the slots.
func TestPlanClaimsGuardedReleases(t *testing.T) {
	told := cl{owners: map[string]string{"a": "0-5460", "b": "5461-10922", "c": "10923-16383"}}
	av := cl{owners: map[string]string{"a": "100-5460", "b": "5461-10922", "c": "10923-16383"}}
	states := map[string]*NodeState{
		"a": st(t, "a", av, "", keysIn("0-5460", 3)),
		"b": st(t, "b", told, "[0-<-a] [1-<-a] [2-<-a]", merge(keysIn("5461-10922", 1), keysIn("0-2", 2))),
		"c": st(t, "c", told, "", merge(keysIn("10923-16383", 1), map[uint16]int64{1: 1})),
	}
	states["a"].GuardedRelease = true
	p := PlanRepairs(states, nil)
	expect(t, p, "claim b 0-2 a", "cleanup a 0-2 b", "cleanup c 1 b")
	if len(p.Refused) != 0 {
		t.Fatalf("refused: %q", p.Refused)
	}
	// A target that holds none of the keys the source holds (lost its
	// data?) does not claim, and the source keeps its keys.
	states["b"].Keys = keysIn("5461-10922", 1)
	p = PlanRepairs(states, nil)
	expect(t, p)
	noteWith(t, p.Notes, "released slots 0-2 to 127.0.0.1:7001", "127.0.0.1:7001 holds none of their keys")
}

// The target of a move dies between the release and the claim, and its
// replica d takes over its slots (not the released ones, never claimed).
// The source's view still names the dead target as owner; d's view names
// the source; nobody claims the slots. Nothing may be removed: the source
// holds the only complete copy, and the old planner flushed it (the dead
// owner in its view) and the replica's copy (the source in d's view).
func TestPlanKeepsKeysWhoseOwnerIsDown(t *testing.T) {
	aView := cl{owners: map[string]string{"a": "100-5460", "b": "0-99", "c": "10923-16383", "d": "5461-10922"}, flags: map[string]string{"b": "fail"}}
	dView := cl{owners: map[string]string{"a": "0-5460", "c": "10923-16383", "d": "5461-10922"}, flags: map[string]string{"b": "fail"}}
	states := map[string]*NodeState{
		"a": st(t, "a", aView, "", keysIn("0-5460", 3)),
		"b": down("127.0.0.1:7001"),
		"c": st(t, "c", dView, "", keysIn("10923-16383", 1)),
		"d": st(t, "d", dView, "", merge(keysIn("5461-10922", 1), keysIn("0-99", 3))),
	}
	p := PlanRepairs(states, nil)
	expect(t, p)
	noteWith(t, p.Notes, "127.0.0.1:7000 holds 300 keys of slots 0-99", "owned by 127.0.0.1:7001, which is unreachable")
	noteWith(t, p.Notes, "127.0.0.1:7003 holds 300 keys of slots 0-99", "no reachable master claims")

	// Reachable but flagged fail? (pfail) by another master: the same.
	states["a"] = st(t, "a", cl{owners: aView.owners}, "", keysIn("0-5460", 3))
	states["b"] = st(t, "b", cl{owners: map[string]string{"a": "100-5460", "b": "0-99"}}, "", keysIn("0-99", 3))
	states["c"] = st(t, "c", cl{owners: dView.owners, flags: map[string]string{"b": "fail?"}}, "", keysIn("10923-16383", 1))
	states["d"] = st(t, "d", dView, "", keysIn("5461-10922", 1))
	p = PlanRepairs(states, nil)
	expect(t, p)
	noteWith(t, p.Notes, "127.0.0.1:7000 holds 300 keys of slots 0-99, whose owner 127.0.0.1:7001 is flagged fail? (pfail) by 127.0.0.1:7002")

	// A healthy owner that holds none of the keys (did it lose them?): left alone too.
	healthy := cl{owners: map[string]string{"a": "100-5460", "b": "0-99", "c": "10923-16383", "d": "5461-10922"}}
	states = map[string]*NodeState{
		"a": st(t, "a", healthy, "", keysIn("0-5460", 3)),
		"b": st(t, "b", healthy, "", nil),
		"c": st(t, "c", healthy, "", nil),
		"d": st(t, "d", healthy, "", nil),
	}
	p = PlanRepairs(states, nil)
	expect(t, p)
	noteWith(t, p.Notes, "whose owner 127.0.0.1:7001 holds none of their keys")
	// With its keys, the orphans go.
	states["b"].Keys = keysIn("0-99", 3)
	expect(t, PlanRepairs(states, nil), "cleanup a 0-99 b")
}

// A move's target that took slots 0-99 over, whose clients then emptied
// slot 5, while the move's cleanup never ran: the source's keys of slot 5
// are orphans as much as the others' are, once the owner is known to have
// held them all since it last started (HeldAll, from its run ID). Without
// that evidence the owner may have lost them (a restart from a stale RDB),
// and they stay, with a note. A cleanup stopped part way (the source
// imports the slots from itself) is judged the same.
func TestPlanCleansOrphansOfASlotItsOwnerEmptied(t *testing.T) {
	moved := cl{owners: map[string]string{"a": "100-5460", "b": "0-99 5461-10922", "c": "10923-16383"}}
	orphans := merge(keysIn("0-5460", 2))
	owner := merge(keysIn("0-4 6-99 5461-10922", 2))
	for _, marks := range []string{"", "[5-<-a]"} {
		states := map[string]*NodeState{
			"a": st(t, "a", moved, marks, orphans),
			"b": st(t, "b", moved, "", owner),
			"c": st(t, "c", moved, "", keysIn("10923-16383", 1)),
		}
		p := PlanRepairs(states, nil)
		expect(t, p, "cleanup a 0-4,6-99 b")
		noteWith(t, p.Notes, "127.0.0.1:7000", "slot 5", "127.0.0.1:7001")
		states["b"].HeldAll = slots.NewSet(slots.Range{Start: 0, End: 99})
		p = PlanRepairs(states, nil)
		expect(t, p, "cleanup a 0-99 b")
		if len(p.Notes) != 0 {
			t.Fatalf("notes with the owner's evidence: %q", p.Notes)
		}
	}
}

// Two masters that claim a slot each in its own view, a slot imported by
// two masters, and a source restarted after its release (it marks the
// slots of its orphaned keys importing from the target, which imports them
// from it) are refused: no repair touches those slots, and Fix refuses.
func TestPlanRefusesConflicts(t *testing.T) {
	base := map[string]string{"a": "0-5460", "b": "5461-10922", "c": "10923-16383"}
	t.Run("two claims", func(t *testing.T) {
		states := map[string]*NodeState{
			"a": st(t, "a", cl{owners: base}, "", keysIn("0-5460", 1)),
			"b": st(t, "b", cl{owners: map[string]string{"a": "0-49 51-5460", "b": "50 5461-10922", "c": "10923-16383"}}, "", keysIn("50-60 5461-10922", 1)),
			"c": st(t, "c", cl{owners: base}, "", keysIn("10923-16383", 1)),
		}
		p := PlanRepairs(states, nil)
		expect(t, p, "cleanup b 51-60 a") // other slots are still planned
		if len(p.Refused) != 1 || !strings.Contains(p.Refused[0], "slot 50: claimed by 127.0.0.1:7000 (config epoch 1) and 127.0.0.1:7001 (config epoch 2)") || p.RefusedSlots.String() != "50" {
			t.Fatalf("refused: %q %s", p.Refused, p.RefusedSlots)
		}
		if err := refusal(p, nil); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "--slots 0-49,51-16383") {
			t.Fatalf("refusal: %v", err)
		}
	})
	t.Run("restarted source", func(t *testing.T) {
		// a released 0-99 to b and restarted: its nodes.conf gives them to
		// b, and it holds their keys, so it imports them from b.
		states := map[string]*NodeState{
			"a": st(t, "a", cl{owners: map[string]string{"a": "100-5460", "b": "0-99 5461-10922", "c": "10923-16383"}},
				"[0-<-b] [1-<-b]", keysIn("0-5460", 1)),
			"b": st(t, "b", cl{owners: base}, "[0-<-a] [1-<-a]", keysIn("0-1 5461-10922", 1)),
			"c": st(t, "c", cl{owners: base}, "", keysIn("10923-16383", 1)),
		}
		p := PlanRepairs(states, nil)
		for _, r := range p.Repairs {
			if r.Slots.Contains(0) || r.Slots.Contains(1) {
				t.Fatalf("a repair of a refused slot: %v", r)
			}
		}
		if len(p.Refused) != 1 || !strings.Contains(p.Refused[0], "slots 0-1: 127.0.0.1:7000 and 127.0.0.1:7001 import them from each other") {
			t.Fatalf("refused: %q", p.Refused)
		}
	})
	t.Run("two importers", func(t *testing.T) {
		states := map[string]*NodeState{
			"a": st(t, "a", cl{owners: base}, "", keysIn("0-5460", 1)),
			"b": st(t, "b", cl{owners: base}, "[7-<-a]", keysIn("7 5461-10922", 1)),
			"c": st(t, "c", cl{owners: base}, "[7-<-a]", keysIn("7 10923-16383", 1)),
		}
		p := PlanRepairs(states, nil)
		expect(t, p)
		if len(p.Refused) != 1 || !strings.Contains(p.Refused[0], "slot 7: imported by 127.0.0.1:7001 (from 127.0.0.1:7000) and 127.0.0.1:7002 (from 127.0.0.1:7000)") {
			t.Fatalf("refused: %q", p.Refused)
		}
	})
}

// A cleanup marks the slots it purges importing from the node itself (see
// cutover.Cleanup). Stopped part way, it is finished: a cleanup where keys
// are left, only the marks cleared where none are; and left alone where
// the owner does not hold the keys.
func TestPlanFinishesACleanupMarkedFromItself(t *testing.T) {
	view := cl{owners: map[string]string{"a": "100-4999", "b": "0-99 5000-9999", "c": "10000-16383"}}
	states := map[string]*NodeState{
		"a": st(t, "a", view, "[0-<-a] [1-<-a] [2-<-a]", merge(keysIn("100-4999", 1), map[uint16]int64{0: 4, 1: 2})),
		"b": st(t, "b", view, "", keysIn("0-99 5000-9999", 1)),
		"c": st(t, "c", view, "", keysIn("10000-16383", 1)),
	}
	expect(t, PlanRepairs(states, nil),
		"rollback a 2 b",  // only the mark
		"cleanup a 0-1 b", // orphans left
	)
	// b lost its keys of slot 0: a's may be the only copy.
	states["b"] = st(t, "b", view, "", keysIn("1-99 5000-9999", 1))
	p := PlanRepairs(states, nil)
	expect(t, p, "rollback a 2 b", "cleanup a 1 b")
	noteWith(t, p.Notes, "slot 0", "import from itself")
}
