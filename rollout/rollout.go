// Package rollout runs a plan's moves: at most Parallel at a time, in the
// plan's order as far as the rules allow, each checked against the
// cluster right before it starts, here (Local) or through the targets'
// sidecars (Sidecars). `slotmover apply` drives it.
package rollout

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/planner"
)

// Results of a move beside mover's.
const (
	ResultStale   = "stale"   // the plan no longer matches the cluster: refused, nothing changed
	ResultSkipped = "skipped" // not started (cancelled before its turn)
	ResultChecked = "checked" // a dry run: the move would run
	ResultRefused = "refused" // over NATS, the sidecar refused the request: nothing started
	ResultLost    = "lost"    // over NATS, the task's end was not seen: it may still run
)

// Outcome is what became of one move of a plan.
type Outcome struct {
	N      int          `json:"n"` // 1-based, in the plan's order
	Move   planner.Move `json:"move"`
	Result string       `json:"result"`
	Err    string       `json:"error,omitempty"`
	Keys   int64        `json:"keys"`
	Total  int64        `json:"total_ms"`
	Pause  float64      `json:"pause_ms"`
	// Throttled is the time the move held because its servers were over
	// its impact budget.
	Throttled int64    `json:"throttled_ms"`
	Repair    []string `json:"repair,omitempty"`
	Task      string   `json:"task,omitempty"` // over NATS, the task's ID on the target's sidecar
	// Start and End bound the move: over NATS, its task's record on the
	// sidecar; else when the runner started and saw the end of it.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
}

// Moved reports whether the move moved (or, in a dry run, would run).
func (o Outcome) Moved() bool { return o.Result == mover.ResultMoved || o.Result == ResultChecked }

// Mover runs one move, fills its outcome and returns its last phase.
// progress is called as it goes.
type Mover interface {
	Move(ctx context.Context, o *Outcome, progress func(mover.Progress)) mover.Phase
}

// Watcher follows one move for a display.
type Watcher interface {
	Progress(mover.Progress)
	End(o Outcome, last mover.Phase)
}

// Runner runs a plan's moves.
type Runner struct {
	Plan     *planner.Plan
	Parallel int
	// Budgeted keeps two moves from loading one target at once (see
	// Conflict): each move paces itself to its target's budget, and a
	// second one would load it before the first's probes see it. It also
	// starts a move beside running ones only while they have room (see
	// hasRoom): on servers that share machines, one move's load shows in
	// the others' probes.
	Budgeted bool
	// RoomWindow is hasRoom's window; 0 for DefaultRoomWindow.
	RoomWindow time.Duration
	Mover      Mover
	// Check, if set, tells whether a move still matches the cluster; a
	// move it fails is refused as stale. Over NATS the sidecar checks.
	Check func(context.Context, planner.Move) error
	// Watch, if set, is called as each move starts; what it returns
	// follows the move to its end.
	Watch func(o Outcome) Watcher
}

// Conflict reports whether m may not start beside the running move o:
// they share a source, one's target is the other's source, or, budgeted,
// they share a target.
func Conflict(o, m planner.Move, budgeted bool) bool {
	return o.SourceID == m.SourceID || o.TargetID == m.SourceID || o.SourceID == m.TargetID || budgeted && o.TargetID == m.TargetID
}

// DefaultRoomWindow is how long running moves must have run, none held by
// its budget, before another starts beside them under a budget: long
// enough for a move's load to show in the others' probes and in their
// status, which apply reads every 250 ms over NATS.
const DefaultRoomWindow = 2 * time.Second

// running is what the runner knows of a running move: when it started,
// when its budget last held it, and its phase.
type running struct {
	started, held time.Time
	phase         mover.Phase
}

// hasRoom reports whether another move may start beside moves under a
// budget: each has run for window, and none was held in the last window.
// A move cleaning its source has copied all: its paced deletes and its
// wait for the target's replicas leave room.
func hasRoom(now time.Time, window time.Duration, moves []running) bool {
	for _, m := range moves {
		if m.phase == mover.PhaseCleanup {
			continue
		}
		if now.Sub(m.started) < window || !m.held.IsZero() && now.Sub(m.held) < window {
			return false
		}
	}
	return true
}

// DryRun checks every move (Check) and changes nothing.
func (r *Runner) DryRun(ctx context.Context) []Outcome {
	var out []Outcome
	for i, m := range r.Plan.Moves {
		o := Outcome{N: i + 1, Move: m, Result: ResultChecked, Keys: m.Keys}
		if err := r.Check(ctx, m); err != nil {
			o.Result, o.Err = ResultStale, err.Error()
		}
		out = append(out, o)
	}
	return out
}

// Run runs the moves and returns their outcomes in the plan's order. A
// cancelled ctx skips the moves not started; those running end as a
// cancelled move does.
func (r *Runner) Run(ctx context.Context) []Outcome {
	moves := r.Plan.Moves
	results := make([]Outcome, len(moves))
	pending := make([]int, len(moves))
	for i := range moves {
		pending[i] = i
	}
	window := cmp.Or(r.RoomWindow, DefaultRoomWindow)
	// states is this goroutine's; mu guards what the moves' progress
	// writes into each.
	var mu sync.Mutex
	states := map[int]*running{}
	conflicts := func(m planner.Move) bool {
		for j := range states {
			if Conflict(moves[j], m, r.Budgeted) {
				return true
			}
		}
		return false
	}
	room := func() bool {
		if !r.Budgeted {
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		var now []running
		for _, s := range states {
			now = append(now, *s)
		}
		return hasRoom(time.Now(), window, now)
	}
	done := make(chan int)
	for len(pending) > 0 || len(states) > 0 {
		if ctx.Err() != nil {
			for _, i := range pending {
				results[i] = Outcome{N: i + 1, Move: moves[i], Result: ResultSkipped, Err: "cancelled before it started"}
			}
			pending = nil
		}
		waiting := false // for room
		for k := 0; k < len(pending) && len(states) < r.Parallel; {
			i := pending[k]
			if conflicts(moves[i]) {
				k++
				continue
			}
			if !room() {
				waiting = true
				break
			}
			pending = append(pending[:k], pending[k+1:]...)
			st := &running{started: time.Now()}
			states[i] = st
			go func() {
				var last time.Duration
				results[i] = r.one(ctx, i, st.started, func(p mover.Progress) {
					mu.Lock()
					defer mu.Unlock()
					st.phase = p.Phase
					if p.Throttled > last {
						last = p.Throttled
						st.held = time.Now()
					}
				})
				done <- i
			}()
		}
		if len(states) == 0 {
			break
		}
		var recheck <-chan time.Time
		if waiting {
			recheck = time.After(window / 8)
		}
		select {
		case i := <-done:
			delete(states, i)
		case <-recheck:
		}
	}
	return results
}

// one checks and runs move i, started by the runner then; observe sees
// its progress.
func (r *Runner) one(ctx context.Context, i int, started time.Time, observe func(mover.Progress)) Outcome {
	o := Outcome{N: i + 1, Move: r.Plan.Moves[i]}
	if ctx.Err() != nil {
		o.Result, o.Err = ResultSkipped, "cancelled before it started"
		return o
	}
	var w Watcher
	if r.Watch != nil {
		w = r.Watch(o)
	}
	progress := func(p mover.Progress) {
		observe(p)
		if w != nil {
			w.Progress(p)
		}
	}
	phase := mover.PhasePreflight
	if err := r.check(ctx, o.Move); err != nil {
		o.Result, o.Err = ResultStale, err.Error()
	} else {
		phase = r.Mover.Move(ctx, &o, progress)
		if o.Start.IsZero() {
			o.Start, o.End = started, time.Now()
		}
	}
	if w != nil {
		w.End(o, phase)
	}
	return o
}

func (r *Runner) check(ctx context.Context, m planner.Move) error {
	if r.Check == nil {
		return nil
	}
	return r.Check(ctx, m)
}
