package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/fix"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// Move is one move the soak asks a Mover for.
type Move struct {
	Seq                  int
	SourceID, SourceAddr string
	TargetID, TargetAddr string
	Slots                *slots.Set
}

// Window is a span of time.
type Window struct{ Start, End time.Time }

// Outcome is what a Mover reports about one move.
type Outcome struct {
	Summary mover.Summary
	Err     error
	// Pauses are the write pauses on the source, if the mover knows them;
	// the report splits latencies by them.
	Pauses []Window
	// The crash record of CrashingMover. CrashArmed says it set the crash
	// fault for this move; Crashed that the move then returned the crash
	// error (ErrCrashed, in CrashError) and ended stuck, right after
	// the source's release. Repairs are what fix did then, RepairedSlots the
	// slots of this move that its give-back returned to the source, and
	// OwnerProvenOn the masters whose own view, read after the fix, names
	// the source as the only owner of every slot with no mark on them (the
	// target's also counting none of their keys). Repaired: all of it held.
	// Forward says fix finished the move instead (Valkey 8, where the
	// release is guarded): then the target is the owner proven, and the
	// source the node holding none of the keys.
	CrashArmed, Crashed, Repaired, Forward bool
	CrashError                             string
	Repairs                                []string
	RepairedSlots                          int
	OwnerProvenOn                          []string
}

// Mover carries out one move. The soak does not care how: the library in
// this process, a subprocess, or a fault-injecting mover that kills itself
// or restarts a node half-way, repairs, and reports what it did. The
// checker only sees the workload's replies and reads.
type Mover interface {
	Move(ctx context.Context, m Move) Outcome
}

// MoverFunc adapts a function to Mover.
type MoverFunc func(ctx context.Context, m Move) Outcome

// Move calls f.
func (f MoverFunc) Move(ctx context.Context, m Move) Outcome { return f(ctx, m) }

// LibraryMover moves with mover.Run in this process. base supplies
// credentials, tunables, hooks and the logger; each move sets the nodes,
// the slots and the task ID. The write pauses come from the move's
// OnCutover hook.
func LibraryMover(base mover.Options) Mover {
	return MoverFunc(func(ctx context.Context, m Move) Outcome {
		opts := base
		opts.Source.Addr, opts.Target.Addr = m.SourceAddr, m.TargetAddr
		opts.Slots = m.Slots
		opts.TaskID = ""
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		opts.Logger = logger.With("move", m.Seq)
		var mu sync.Mutex
		var pauses []Window
		next := base.Hooks.OnCutover
		opts.Hooks.OnCutover = func(res cutover.Result, err error) {
			if res.Pause > 0 {
				end := time.Now()
				mu.Lock()
				pauses = append(pauses, Window{Start: end.Add(-res.Pause), End: end})
				mu.Unlock()
			}
			if next != nil {
				next(res, err)
			}
		}
		sum, err := mover.Run(ctx, opts)
		mu.Lock()
		defer mu.Unlock()
		return Outcome{Summary: sum, Err: err, Pauses: pauses}
	})
}

// ErrCrashed is what CrashingMover's moves return where they crash.
var ErrCrashed = errors.New("crashed right after the release (test hook)")

// CrashingMover is LibraryMover whose every nth move stops right after the
// source released the slots, as a crash there would (the source's pause
// runs out by itself, nothing is claimed or cleaned up), and is then
// repaired by fix.Run for those slots, as an operator would. Fix gives
// the slots back to the source (the target may lack writes the source made
// after the fence) and rolls the target back: the move ends rolled back,
// with Outcome.Repaired and the crash record filled in from what happened
// (the move's error, fix's repairs, every master's own view afterwards),
// once every master's own view has the source as the owner of every slot
// and the target holds none of their keys (else it fails). Where the
// release is guarded (Valkey 8), fix finishes the move forward instead:
// the target is then the owner proven and the move ends moved
// (Outcome.Forward). A move armed to crash that ended before its release
// (a rollback) is reported as it ended. The checker must find no lost write.
func CrashingMover(base mover.Options, every int) Mover {
	normal := LibraryMover(base)
	crashing := base
	crashing.Hooks.AfterRelease = func() error { return ErrCrashed }
	crash := LibraryMover(crashing)
	return MoverFunc(func(ctx context.Context, m Move) Outcome {
		if every <= 0 || m.Seq%every != 0 {
			return normal.Move(ctx, m)
		}
		out := crash.Move(ctx, m)
		out.CrashArmed = true
		if out.Err != nil {
			out.CrashError = out.Err.Error()
		}
		if !errors.Is(out.Err, ErrCrashed) || out.Summary.Result != mover.ResultStuck {
			// It ended before the release (nothing to fix), or failed in
			// another way, which the soak reports as it is.
			return out
		}
		out.Crashed = true
		src := base.Source.With(m.SourceAddr).Client()
		forward, err := cutover.SetSlotBlocks(ctx, src)
		src.Close()
		if err != nil {
			out.Err = fmt.Errorf("crashed after the release; read the source's version: %w", err)
			return out
		}
		out.Forward = forward
		// Other moves run meanwhile (their connections are open: Force), on
		// other slots (Slots keeps the fix off them).
		// As the sidecar does: the target's run ID from the move, so that
		// a slot the workers empty on it is no reason to keep the copies.
		held := []fix.Held{{Owner: out.Summary.TargetID, RunID: out.Summary.TargetRunID, Slots: m.Slots}}
		repairs, notes, err := fix.Run(ctx, fix.Options{Seed: base.Source.With(m.TargetAddr), Slots: m.Slots, Force: true, Held: held, Logger: base.Logger})
		for _, r := range repairs {
			out.Repairs = append(out.Repairs, r.String())
		}
		if err == nil {
			out.OwnerProvenOn, out.RepairedSlots, err = repaired(ctx, base.Source.With(m.SourceAddr), m, forward, repairs, notes)
		}
		if err != nil {
			out.Err = fmt.Errorf("crashed after the release; fix: %w", err)
			return out
		}
		if base.Logger != nil {
			base.Logger.Info("soak: move crashed after the release and was repaired by fix", "move", m.Seq, "forward", forward,
				"slots", out.RepairedSlots, "proven_on", len(out.OwnerProvenOn), "repairs", fmt.Sprint(repairs))
		}
		out.Summary.Result, out.Err, out.Repaired = mover.ResultRolledBack, nil, true
		if forward {
			out.Summary.Result = mover.ResultMoved
		}
		return out
	})
}

// repaired checks what fix must have done with a move that crashed after
// its release: one give-back of all its slots from the source to the
// target (forward: a claim by the target, or none if the target took them
// over by gossip first, and no give-back), after which every master's own
// view names the owner (the source; forward, the target) as the only one
// of every slot, with no mark on them, and the other node holds none of
// their keys. It returns the masters whose views it read and the number of
// the move's slots proven so.
func repaired(ctx context.Context, conn mover.Conn, m Move, forward bool, repairs []fix.Repair, notes []string) ([]string, int, error) {
	owner, owned, other := m.SourceID, m.SourceAddr, m.TargetID
	if forward {
		owner, owned, other = m.TargetID, m.TargetAddr, m.SourceID
	}
	gave := false
	for _, r := range repairs {
		switch {
		case r.Kind == fix.RepairGiveBack && forward:
			return nil, 0, fmt.Errorf("fix gave slots %s back although the release was guarded: %v", r.Slots, repairs)
		case r.Kind == fix.RepairGiveBack && r.NodeID == m.SourceID && r.Target == m.TargetID && r.Slots.String() == m.Slots.String():
			gave = true
		}
	}
	if !gave && !forward {
		return nil, 0, fmt.Errorf("no give-back of slots %s from %s among the repairs %v (notes %q)", m.Slots, m.SourceAddr, repairs, notes)
	}
	// The views converge by gossip within moments of the repair.
	deadline := time.Now().Add(10 * time.Second)
	for {
		proven, n, err := ownerEverywhere(ctx, conn, m, owner, owned, other)
		if err == nil || time.Now().After(deadline) {
			return proven, n, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ownerEverywhere reads every master's own view: owner must be the only
// one of every slot of m, with no mark on them, and other must hold none
// of their keys.
func ownerEverywhere(ctx context.Context, conn mover.Conn, m Move, owner, owned, other string) ([]string, int, error) {
	c := conn.Client()
	top, err := cluster.Load(ctx, c)
	c.Close()
	if err != nil {
		return nil, 0, err
	}
	var proven []string
	for _, n := range top.Masters() {
		nc := conn.With(n.Addr).Client()
		own, err := cluster.Load(ctx, nc)
		var counts []int64
		if err == nil && n.ID == other {
			counts, err = cluster.CountKeys(ctx, nc, m.Slots.Slots())
		}
		nc.Close()
		if err != nil {
			return proven, 0, err
		}
		for _, s := range m.Slots.Slots() {
			o := own.AssignedTo(s)
			if o == nil || o.ID != owner || own.Myself.Importing[s] != "" || own.Myself.Migrating[s] != "" {
				return proven, 0, fmt.Errorf("after the fix, %s does not see %s as the only owner of slot %d (owner %v, marks %q %q)",
					n.Addr, owned, s, o, own.Myself.Importing[s], own.Myself.Migrating[s])
			}
		}
		for i, k := range counts {
			if k > 0 {
				return proven, 0, fmt.Errorf("after the fix, %s keeps %d keys of slot %d", n.Addr, k, m.Slots.Slots()[i])
			}
		}
		proven = append(proven, n.Addr)
	}
	return proven, m.Slots.Len(), nil
}

// Classes of move outcomes in the report.
const (
	classMoved      = "moved"
	classRefused    = "refused"     // refused before anything changed
	classRolledBack = "rolled_back" // failed or cancelled, and cleanly undone
	classFailed     = "failed"      // anything else: the soak fails
)

func classify(o Outcome) string {
	var ie *mover.InputError
	switch r := o.Summary.Result; {
	case errors.As(o.Err, &ie) || r == mover.ResultRefused:
		return classRefused
	case r == mover.ResultMoved && o.Err == nil:
		return classMoved
	case r == mover.ResultRolledBack || r == mover.ResultCancelled:
		return classRolledBack
	}
	return classFailed
}

// scheduler picks moves and keeps two moves off the same slots.
type scheduler struct {
	mu       sync.Mutex
	rng      *rand.Rand
	pick     string // PickRandom or PickRoundRobin
	slotPick string // SlotsMixed, SlotsRun or SlotsRandom
	k        int
	busy     [slots.Count]bool // slots of moves in flight
	// quarantined slots belong to moves that failed half-way: they keep
	// marks or orphans that would get every later move of them refused.
	quarantined [slots.Count]bool
	involved    map[string]int // node ID → moves in flight that involve it
	sourcing    map[string]int // node ID → moves in flight from it
	rr          int
	picks       int
	bigSlots    []uint16 // slots of the big keys, sorted
	// moving is the slots of moves in flight, for the workers to aim at;
	// replaced, never changed, so readers need no lock.
	moving atomic.Pointer[[]uint16]
}

// publish updates moving from busy; the caller holds mu.
func (s *scheduler) publish() {
	var xs []uint16
	for x, b := range s.busy {
		if b {
			xs = append(xs, uint16(x))
		}
	}
	s.moving.Store(&xs)
}

// movingSlots returns the slots of the moves in flight (do not modify).
func (s *scheduler) movingSlots() []uint16 {
	if p := s.moving.Load(); p != nil {
		return *p
	}
	return nil
}

func newScheduler(cfg *Config, bigSlots []uint16) *scheduler {
	big := slices.Clone(bigSlots)
	slices.Sort(big)
	return &scheduler{
		rng:  rand.New(rand.NewPCG(uint64(cfg.Seed), 0x50a4)),
		pick: cfg.Pick, slotPick: cfg.SlotPick, k: cfg.SlotsPerMove,
		involved: map[string]int{},
		sourcing: map[string]int{},
		bigSlots: slices.Compact(big),
	}
}

// plan picks a move in top and reserves its slots and nodes; ok is false
// when no move is possible now.
func (s *scheduler) plan(top *cluster.Topology, seq int) (Move, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	masters := usableMasters(top)
	sort.Slice(masters, func(i, j int) bool { return masters[i].ID < masters[j].ID })
	if len(masters) < 2 {
		return Move{}, false
	}
	type cand struct {
		n    *cluster.Node
		free []uint16
	}
	var sources []cand
	for _, n := range masters {
		var free []uint16
		for _, x := range n.Slots.Slots() {
			if !s.busy[x] && !s.quarantined[x] {
				free = append(free, x)
			}
		}
		// A master that another move involves keeps a slot: drained, it may
		// turn into a replica (replica migration) under that other move.
		if s.involved[n.ID] > 0 && len(free) > 0 && len(free) >= n.Slots.Len() {
			free = free[:len(free)-1]
		}
		if len(free) > 0 {
			sources = append(sources, cand{n, free})
		}
	}
	if len(sources) == 0 {
		return Move{}, false
	}
	// Every fourth move takes a big key along when a source has one free:
	// big keys are few, and their chunked copy is a path of its own.
	withBigKey := s.picks%4 == 0 && len(s.bigSlots) > 0
	if withBigKey {
		var withBig []cand
		for _, c := range sources {
			for _, x := range s.bigSlots {
				if _, ok := slices.BinarySearch(c.free, x); ok {
					withBig = append(withBig, c)
					break
				}
			}
		}
		if len(withBig) > 0 {
			sources = withBig
		}
	}
	if s.pick == PickSameSource {
		if busy := slices.DeleteFunc(slices.Clone(sources), func(c cand) bool { return s.sourcing[c.n.ID] == 0 }); len(busy) > 0 {
			sources = busy
		}
	}
	var src cand
	var dst *cluster.Node
	if s.pick == PickRoundRobin {
		src = sources[s.rr%len(sources)]
		s.rr++
		i := slices.IndexFunc(masters, func(n *cluster.Node) bool { return n.ID == src.n.ID })
		dst = masters[(i+1)%len(masters)]
	} else {
		src = sources[s.rng.IntN(len(sources))]
		for dst == nil || dst.ID == src.n.ID {
			dst = masters[s.rng.IntN(len(masters))]
		}
	}
	must := -1
	for _, x := range s.bigSlots {
		if _, ok := slices.BinarySearch(src.free, x); ok && withBigKey {
			must = int(x)
			break
		}
	}
	set := s.chooseSlots(src.free, must)
	for _, x := range set.Slots() {
		s.busy[x] = true
	}
	s.involved[src.n.ID]++
	s.involved[dst.ID]++
	s.sourcing[src.n.ID]++
	s.publish()
	return Move{Seq: seq, SourceID: src.n.ID, SourceAddr: src.n.Addr, TargetID: dst.ID, TargetAddr: dst.Addr, Slots: set}, true
}

// chooseSlots takes up to k of free (sorted): a contiguous run, or k at
// random; either holds must unless it is -1.
func (s *scheduler) chooseSlots(free []uint16, must int) *slots.Set {
	want := min(s.k, len(free))
	mode := s.slotPick
	if mode == SlotsMixed {
		mode = SlotsRun
		if s.picks%2 == 1 {
			mode = SlotsRandom
		}
	}
	s.picks++
	set := &slots.Set{}
	if mode == SlotsRandom {
		if must >= 0 {
			set.Add(uint16(must))
		}
		for _, i := range s.rng.Perm(len(free)) {
			if set.Len() >= want {
				break
			}
			set.Add(free[i])
		}
		return set
	}
	// The longest of a few runs from random starts, up to want slots.
	var best []uint16
	tries := 8
	if must >= 0 {
		tries = 1 // the run starts at must
	}
	for try := 0; try < tries && len(best) < want; try++ {
		i := s.rng.IntN(len(free))
		if must >= 0 {
			i, _ = slices.BinarySearch(free, uint16(must))
		}
		run := []uint16{free[i]}
		for j := i + 1; j < len(free) && len(run) < want && free[j] == free[j-1]+1; j++ {
			run = append(run, free[j])
		}
		if len(run) > len(best) {
			best = run
		}
	}
	for _, x := range best {
		set.Add(x)
	}
	return set
}

// release ends a move; a failed one's slots are never planned again.
func (s *scheduler) release(m Move, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range m.Slots.Slots() {
		s.busy[x] = false
		s.quarantined[x] = s.quarantined[x] || failed
	}
	s.involved[m.SourceID]--
	s.involved[m.TargetID]--
	s.sourcing[m.SourceID]--
	s.publish()
}
