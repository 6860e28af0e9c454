package soak

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/fix"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

const nodesText = `a 127.0.0.1:1@11 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:2@12 master - 0 0 2 connected 5461-10922
c 127.0.0.1:3@13 master - 0 0 3 connected 10923-16383
d 127.0.0.1:4@14 master - 0 0 4 connected
e 127.0.0.1:5@15 slave a 0 0 1 connected`

func TestSchedulerNeverOverlaps(t *testing.T) {
	top, err := cluster.Parse(nodesText)
	if err != nil {
		t.Fatal(err)
	}
	for _, pick := range []string{PickRandom, PickRoundRobin} {
		s := newScheduler(&Config{Seed: 7, Pick: pick, SlotPick: SlotsMixed, SlotsPerMove: 300}, []uint16{77, 6000, 12000})
		var inFlight []Move
		seen := map[uint16]bool{}
		for i := 0; i < 20; i++ {
			m, ok := s.plan(top, i)
			if !ok {
				t.Fatalf("%s: no move planned", pick)
			}
			if m.SourceID == m.TargetID || m.SourceID == "e" || m.TargetID == "e" || m.SourceID == "d" {
				t.Fatalf("%s: bad pair %s -> %s", pick, m.SourceID, m.TargetID)
			}
			if n := m.Slots.Len(); n == 0 || n > 300 {
				t.Fatalf("%s: %d slots", pick, n)
			}
			src := top.ByID(m.SourceID)
			for _, x := range m.Slots.Slots() {
				if seen[x] {
					t.Fatalf("%s: slot %d planned twice while in flight", pick, x)
				}
				if !src.Slots.Contains(x) {
					t.Fatalf("%s: slot %d is not the source's", pick, x)
				}
				seen[x] = true
			}
			if got := len(s.movingSlots()); got != len(seen) {
				t.Fatalf("%s: %d moving slots published, %d in flight", pick, got, len(seen))
			}
			inFlight = append(inFlight, m)
			if len(inFlight) == 3 { // release the oldest, as a finished move would
				s.release(inFlight[0], false)
				for _, x := range inFlight[0].Slots.Slots() {
					delete(seen, x)
				}
				inFlight = inFlight[1:]
			}
		}
	}
}

// A master that another move involves keeps one slot: the plan takes the
// others, not nothing.
func TestSchedulerKeepsASlotOnBusyMasters(t *testing.T) {
	top, err := cluster.Parse("a 127.0.0.1:1@11 myself,master - 0 0 1 connected 0-9\nb 127.0.0.1:2@12 master - 0 0 2 connected")
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(&Config{Seed: 1, Pick: PickRoundRobin, SlotPick: SlotsRun, SlotsPerMove: 100}, nil)
	first, ok := s.plan(top, 1) // a -> b: a's whole 10 slots, nothing else involves a
	if !ok || first.SourceID != "a" || first.TargetID != "b" || first.Slots.String() != "0-9" {
		t.Fatalf("first move: planned %v, %+v", ok, first)
	}
	s.release(first, false)
	s.involved["a"] = 1 // say a is the target of another move
	m, ok := s.plan(top, 2)
	if !ok {
		t.Fatal("no move planned: a still has 9 slots to give")
	}
	if m.SourceID != "a" || m.TargetID != "b" || m.Slots.String() != "0-8" {
		t.Fatalf("planned %s -> %s slots %s: want a -> b slots 0-8, slot 9 kept on a", m.SourceID, m.TargetID, m.Slots)
	}
}

func TestSchedulerTakesBigKeysAlong(t *testing.T) {
	top, err := cluster.Parse(nodesText)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{SlotsRun, SlotsRandom} {
		s := newScheduler(&Config{Seed: 5, Pick: PickRandom, SlotPick: mode, SlotsPerMove: 10}, []uint16{12000})
		with := 0
		for i := 0; i < 40; i++ {
			m, ok := s.plan(top, i)
			if !ok {
				t.Fatal("no move planned")
			}
			if m.Slots.Contains(12000) {
				with++
				if m.Slots.Len() != 10 {
					t.Fatalf("%s: %d slots with the big key's", mode, m.Slots.Len())
				}
			}
			s.release(m, false)
		}
		if with < 10 {
			t.Fatalf("%s: the big key's slot moved %d times in 40 moves", mode, with)
		}
	}
}

func TestSchedulerQuarantinesFailedMoves(t *testing.T) {
	top, err := cluster.Parse(nodesText)
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(&Config{Seed: 3, Pick: PickRandom, SlotPick: SlotsRandom, SlotsPerMove: 1000}, nil)
	bad, ok := s.plan(top, 1)
	if !ok || bad.Slots.Len() != 1000 {
		t.Fatalf("the first move: planned %v, %d slots (want 1000)", ok, bad.Slots.Len())
	}
	s.release(bad, true)
	for i := 0; i < 50; i++ {
		m, ok := s.plan(top, i)
		if !ok {
			t.Fatal("no move planned")
		}
		if m.Slots.Len() != 1000 {
			t.Fatalf("move %d: %d slots planned, want 1000", i, m.Slots.Len())
		}
		for _, x := range m.Slots.Slots() {
			if bad.Slots.Contains(x) {
				t.Fatalf("slot %d of a failed move planned again", x)
			}
		}
		s.release(m, false)
	}
}

func TestSpans(t *testing.T) {
	ss := merge([]span{{50, 60}, {0, 10}, {5, 20}, {100, 100}})
	if len(ss) != 3 || ss[0] != (span{0, 20}) {
		t.Fatalf("merge: %v", ss)
	}
	for _, c := range []struct {
		a, b int64
		want bool
	}{{21, 49, false}, {15, 30, true}, {60, 70, true}, {99, 99, false}, {99, 101, true}, {101, 200, false}} {
		if got := overlaps(ss, c.a, c.b); got != c.want {
			t.Errorf("overlaps(%d, %d) = %v", c.a, c.b, got)
		}
	}
	l := summarize([]int64{1000, 2000, 3000, 4000})
	if l.Count != 4 || l.P50 != 2 || l.Max != 4 || l.P99 != 4 {
		t.Fatalf("summarize: %+v", l)
	}
}

// With PickSameSource a move in flight lends its source to the next one.
func TestPickSameSourceOverlapsMovesFromOneSource(t *testing.T) {
	top, err := cluster.Parse(nodesText)
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(&Config{Seed: 11, Pick: PickSameSource, SlotPick: SlotsRun, SlotsPerMove: 10}, nil)
	for i := range 20 {
		first, ok := s.plan(top, 2*i)
		if !ok {
			t.Fatal("no first move")
		}
		second, ok := s.plan(top, 2*i+1)
		if !ok {
			t.Fatal("no second move")
		}
		if second.SourceID != first.SourceID {
			t.Fatalf("round %d: the second move's source %s is not the first's %s", i, second.SourceID, first.SourceID)
		}
		s.release(first, false)
		s.release(second, false)
	}
}

// The report's crash record comes from the outcomes: armed, crashed with
// the crash error, given back with the slots fix repaired; an armed move
// that moved all the same fails the soak.
func TestReportCountsCrashesFromOutcomes(t *testing.T) {
	t0 := time.Now()
	set := func(spec string) *slots.Set {
		s, err := slots.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func(seq int, spec string, out Outcome) moveRun {
		m := Move{Seq: seq, SourceID: "a", SourceAddr: "127.0.0.1:1", TargetID: "b", TargetAddr: "127.0.0.1:2", Slots: set(spec)}
		return moveRun{move: m, out: out, class: classify(out), start: t0.Add(time.Duration(seq) * time.Second), end: t0.Add(time.Duration(seq)*time.Second + 100*time.Millisecond)}
	}
	moved := mover.Summary{Result: mover.ResultMoved, PauseMS: 3, CutoverAttempts: 1}
	s := &soak{cfg: &Config{Addr: "127.0.0.1:1"}, t0: t0, moves: []moveRun{
		run(1, "0-9", Outcome{Summary: moved, Pauses: []Window{{t0, t0.Add(3 * time.Millisecond)}}}),
		run(2, "10-19", Outcome{Summary: mover.Summary{Result: mover.ResultRolledBack}, CrashArmed: true, Crashed: true,
			CrashError: ErrCrashed.Error(), Repaired: true, Repairs: []string{"give-back"}, RepairedSlots: 10,
			OwnerProvenOn: []string{"127.0.0.1:1", "127.0.0.1:2"}}),
		run(3, "20-29", Outcome{Summary: moved, CrashArmed: true}), // the fault did nothing
	}}
	r := s.report(nil, &redirects{}, nil, nil, t0.Add(5*time.Second), t0.Add(6*time.Second), "x")
	m := r.Moves
	if m.CrashArmed != 2 || m.Crashed != 1 || m.Repaired != 1 || m.RepairedSlots != 10 || m.CrashMissed != 1 || m.Moved != 2 || m.RolledBack != 1 {
		t.Fatalf("moves report %+v", m)
	}
	if e := m.List[1]; !e.Crashed || e.CrashError != ErrCrashed.Error() || e.RepairedSlots != 10 || len(e.OwnerProvenOn) != 2 {
		t.Fatalf("crashed move's entry %+v", e)
	}
	if e := m.List[0]; len(e.AttemptPausesMS) != 1 || e.AttemptPausesMS[0] != 3 {
		t.Fatalf("attempt pauses %v", e.AttemptPausesMS)
	}
	if r.Pass || !slices.ContainsFunc(r.Failures, func(f string) bool { return strings.Contains(f, "armed to crash") }) {
		t.Fatalf("an armed move that moved passes: %v", r.Failures)
	}
	var b bytes.Buffer
	r.WriteText(&b)
	for _, want := range []string{"move 2 crashed: " + ErrCrashed.Error(), "giving back 10 of its 10 slots", "own view of 2 masters", "move 3 was armed to crash after the release but ended moved"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, b.String())
		}
	}
}

// The crash-and-fix checker (repaired, ownerEverywhere) is able to fail:
// on a clean cluster it proves the source the owner on every master, and
// it reports a repair list without the move's give-back, a give-back where
// the release was guarded, keys of the slots left on the target, a mark
// left on it, and a release that nothing repaired.
func TestRepairCheckerCatchesWhatFixLeftUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
	source, target := cl.Nodes[0].Client(), cl.Nodes[2].Client()
	defer source.Close()
	defer target.Close()
	do := func(c *redis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	m := Move{Seq: 1, SourceID: cl.IDs[0], SourceAddr: cl.Nodes[0].Addr, TargetID: cl.IDs[2], TargetAddr: cl.Nodes[2].Addr,
		Slots: slots.NewSet(slots.Range{Start: 0, End: 9})}
	conn := mover.Conn{Addr: m.SourceAddr}
	check := func(want string) {
		t.Helper()
		proven, n, err := ownerEverywhere(ctx, conn, m, m.SourceID, m.SourceAddr, m.TargetID)
		switch {
		case want == "" && (err != nil || len(proven) != 3 || n != 10):
			t.Fatalf("clean cluster: proven on %v, %d slots, %v; want 3 masters, 10 slots", proven, n, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("checker: %v (proven on %v, %d slots); want an error with %q", err, proven, n, want)
		}
	}
	giveBack := func(spec string) fix.Repair {
		s, err := slots.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return fix.Repair{Kind: fix.RepairGiveBack, NodeID: m.SourceID, Addr: m.SourceAddr, Slots: s, Target: m.TargetID, TargetAddr: m.TargetAddr}
	}

	check("")
	if _, _, err := repaired(ctx, conn, m, false, []fix.Repair{giveBack("0-9")}, nil); err != nil {
		t.Fatalf("a give-back of the move's slots on a clean cluster: %v", err)
	}
	for _, c := range []struct {
		name    string
		forward bool
		repairs []fix.Repair
		want    string
	}{
		{"no repair", false, nil, "no give-back of slots 0-9 from " + m.SourceAddr},
		{"a give-back of part of the slots", false, []fix.Repair{giveBack("0-4")}, "no give-back of slots 0-9"},
		{"a give-back where the release was guarded", true, []fix.Repair{giveBack("0-9")}, "gave slots 0-9 back although the release was guarded"},
	} {
		if _, _, err := repaired(ctx, conn, m, c.forward, c.repairs, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}

	// A key of slot 3 left on the target (written while it imported the
	// slot, as the move's copy was).
	key := "{" + slotTag(t, 3) + "}:left"
	asking := func(cmd ...any) {
		t.Helper()
		do(target, "CLUSTER", "SETSLOT", 3, "IMPORTING", m.SourceID)
		cmds, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Do(ctx, cmd...)
			return nil
		})
		if err != nil {
			t.Fatalf("ASKING %v on the target: %v (%v)", cmd, err, cmds)
		}
		do(target, "CLUSTER", "SETSLOT", 3, "STABLE")
	}
	asking("SET", key, "v")
	check("keeps 1 keys of slot 3")
	asking("DEL", key)
	check("")

	// An importing mark left on the target.
	do(target, "CLUSTER", "SETSLOT", 5, "IMPORTING", m.SourceID)
	check("does not see " + m.SourceAddr + " as the only owner of slot 5")
	do(target, "CLUSTER", "SETSLOT", 5, "STABLE")
	check("")

	// Released to the target, which never claimed, and not given back
	// (without the target's importing marks, caught above: the owner alone).
	args := []any{"CLUSTER", "DELSLOTS"}
	for s := range 10 {
		args = append(args, s)
	}
	do(source, args...)
	for s := range 10 {
		do(source, "CLUSTER", "SETSLOT", s, "NODE", m.TargetID)
	}
	check("does not see " + m.SourceAddr + " as the only owner of slot 0")
}

// slotTag is a hash tag of the slot.
func slotTag(t *testing.T, slot uint16) string {
	t.Helper()
	for i := 0; i < 1<<20; i++ {
		if slots.ForString(strconv.Itoa(i)) == slot {
			return strconv.Itoa(i)
		}
	}
	t.Fatalf("no tag of slot %d", slot)
	return ""
}
