package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/planner"
)

// Two moves run at once only if they touch no node in two roles and,
// under a budget, load no target twice.
func TestConflict(t *testing.T) {
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
		if got := Conflict(tc.running, tc.next, tc.budgeted); got != tc.want {
			t.Errorf("%s→%s running, %s→%s next, budgeted %v: conflict %v, want %v",
				tc.running.SourceID, tc.running.TargetID, tc.next.SourceID, tc.next.TargetID, tc.budgeted, got, tc.want)
		}
	}
}

// fakeMover records which moves ran at once; each takes 20 ms.
type fakeMover struct {
	mu      sync.Mutex
	running map[int]planner.Move
	most    int
	clashes []string
}

func (f *fakeMover) Move(ctx context.Context, o *Outcome, progress func(mover.Progress)) mover.Phase {
	f.mu.Lock()
	for n, m := range f.running {
		if Conflict(m, o.Move, true) {
			f.clashes = append(f.clashes, fmt.Sprintf("#%d and #%d", n, o.N))
		}
	}
	f.running[o.N] = o.Move
	f.most = max(f.most, len(f.running))
	f.mu.Unlock()
	progress(mover.Progress{Phase: mover.PhaseSnapshot})
	time.Sleep(20 * time.Millisecond) // well past the room window of 1 ms, on a busy machine too
	f.mu.Lock()
	delete(f.running, o.N)
	f.mu.Unlock()
	o.Result, o.Keys = mover.ResultMoved, 1
	return mover.PhaseDone
}

type countingWatcher struct{ progress, ends *atomic.Int64 }

func (w countingWatcher) Progress(mover.Progress)  { w.progress.Add(1) }
func (w countingWatcher) End(Outcome, mover.Phase) { w.ends.Add(1) }

// The runner keeps to Parallel and to Conflict, runs every move once in
// the plan's order as far as that allows, reports each to its watcher,
// refuses a move its check fails and skips all once cancelled.
func TestRunner(t *testing.T) {
	var moves []planner.Move
	for i := range 12 {
		moves = append(moves, planner.Move{SourceID: fmt.Sprint("s", i%4), TargetID: fmt.Sprint("t", i%3), Slots: fmt.Sprint(i)})
	}
	f := &fakeMover{running: map[int]planner.Move{}}
	var progress, ends atomic.Int64
	r := &Runner{Plan: &planner.Plan{Moves: moves}, Parallel: 3, Budgeted: true, RoomWindow: time.Millisecond, Mover: f,
		Check: func(_ context.Context, m planner.Move) error {
			if m.Slots == "5" {
				return errors.New("stale on purpose")
			}
			return nil
		},
		Watch: func(Outcome) Watcher { return countingWatcher{&progress, &ends} }}
	out := r.Run(context.Background())
	if len(f.clashes) > 0 || f.most > 3 || f.most < 2 {
		t.Fatalf("conflicting moves ran at once: %v; at most %d at once, want 2 or 3", f.clashes, f.most)
	}
	for i, o := range out {
		want := mover.ResultMoved
		if i == 5 {
			want = ResultStale
		}
		if o.N != i+1 || o.Result != want {
			t.Fatalf("outcome %d: %+v, want %s", i, o, want)
		}
	}
	if progress.Load() != 11 || ends.Load() != 12 {
		t.Fatalf("the watchers saw %d progress reports and %d ends, want 11 and 12", progress.Load(), ends.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, o := range r.Run(ctx) {
		if o.Result != ResultSkipped {
			t.Fatalf("cancelled before the start: %+v, want skipped", o)
		}
	}
}

// Under a budget, a move starts beside others only once each has run for
// the window and none was held in it.
func TestHasRoom(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const w = 2 * time.Second
	for _, tc := range []struct {
		name  string
		moves []running
		want  bool
	}{
		{"none running", nil, true},
		{"one just started", []running{{started: t0.Add(-time.Second)}}, false},
		{"one running for the window, never held", []running{{started: t0.Add(-w)}}, true},
		{"one held a second ago", []running{{started: t0.Add(-time.Minute), held: t0.Add(-time.Second)}}, false},
		{"one held a window ago", []running{{started: t0.Add(-time.Minute), held: t0.Add(-w)}}, true},
		{"two, one of them new", []running{{started: t0.Add(-time.Minute)}, {started: t0.Add(-time.Millisecond)}}, false},
		{"one held a second ago, now cleaning its source", []running{{started: t0.Add(-time.Minute), held: t0.Add(-time.Second), phase: mover.PhaseCleanup}}, true},
		{"one new, cleaning already", []running{{started: t0.Add(-time.Millisecond), phase: mover.PhaseCleanup}}, true},
	} {
		if got := hasRoom(t0, w, tc.moves); got != tc.want {
			t.Errorf("%s: room %v, want %v", tc.name, got, tc.want)
		}
	}
}

// heldMover holds its first move for a while, as a budget over its
// limit does, and reports it; then each move runs 150 ms.
type heldMover struct{ holdFor time.Duration }

func (h heldMover) Move(ctx context.Context, o *Outcome, progress func(mover.Progress)) mover.Phase {
	if o.N == 1 {
		start := time.Now()
		for time.Since(start) < h.holdFor {
			time.Sleep(5 * time.Millisecond)
			progress(mover.Progress{Phase: mover.PhaseSnapshot, Throttled: time.Since(start)})
		}
	}
	time.Sleep(150 * time.Millisecond)
	o.Result = mover.ResultMoved
	return mover.PhaseDone
}

// A move held by its budget keeps the next from starting beside it until
// it has gone a window unheld; with the budget off all start at once.
func TestRunnerStartsMovesWhileThereIsRoom(t *testing.T) {
	moves := []planner.Move{{SourceID: "a", TargetID: "x"}, {SourceID: "b", TargetID: "y"}, {SourceID: "c", TargetID: "z"}}
	const window, hold = 50 * time.Millisecond, 200 * time.Millisecond
	for _, budgeted := range []bool{true, false} {
		r := &Runner{Plan: &planner.Plan{Moves: moves}, Parallel: 3, Budgeted: budgeted, RoomWindow: window, Mover: heldMover{holdFor: hold}}
		out := r.Run(context.Background())
		first := out[0].Start
		for _, o := range out[1:] {
			after := o.Start.Sub(first)
			if budgeted && after < hold+window || !budgeted && after >= hold {
				t.Errorf("budgeted %v: move %d started %s after the first, which was held for %s (window %s)", budgeted, o.N, after, hold, window)
			}
		}
		if budgeted && out[2].Start.Sub(out[1].Start) < window {
			t.Errorf("moves 2 and 3 started %s apart, within the window %s", out[2].Start.Sub(out[1].Start), window)
		}
	}
}
