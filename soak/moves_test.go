package soak

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
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
