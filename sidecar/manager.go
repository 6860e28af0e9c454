package sidecar

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/fix"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// Config configures a Local manager.
type Config struct {
	Node     cluster.Conn // the local master, into which every task imports
	MaxTasks int          // tasks running at once; more are refused
	// Move holds the tunables of every move; Source, Target, Slots,
	// TaskID, Progress and Logger are set per task.
	Move   mover.Options
	Logger *slog.Logger
	// OnChange is called with a copy of a task's record whenever it
	// changes (phase, progress, end), from the task's goroutine: for
	// events, metrics and the KV bucket. It must not block for long.
	OnChange func(Task)
}

// Local is the Manager of one sidecar: it runs imports into the local
// master with the mover, one task per source.
type Local struct {
	cfg  Config
	log  *slog.Logger
	base context.Context // the tasks' context; stop ends their cleanups at shutdown
	stop context.CancelFunc

	mu      sync.Mutex
	tasks   map[string]*entry
	order   []string // task IDs, oldest first
	closing bool
	wg      sync.WaitGroup // one per task goroutine
}

type entry struct {
	rec    Task
	set    *slots.Set
	move   *mover.Move
	budget *throttle.Budget // the request's, if it set one
}

// New returns a manager with no tasks.
func New(cfg Config) *Local {
	if cfg.MaxTasks < 1 {
		cfg.MaxTasks = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	base, stop := context.WithCancel(context.Background())
	return &Local{cfg: cfg, log: cfg.Logger, base: base, stop: stop, tasks: map[string]*entry{}}
}

// Import starts one task per current owner of set's slots, all or none:
// slots the local master owns, that no master owns, or that a running
// task moves already, and more tasks than the limit allows, refuse the
// whole request with nothing started.
func (l *Local) Import(ctx context.Context, req Request) ([]Task, error) {
	set := req.Slots
	if set == nil || set.Len() == 0 {
		return nil, errors.New("no slots given")
	}
	node := l.cfg.Node.Client()
	top, err := cluster.Load(ctx, node)
	var server info.Fields
	if err == nil {
		server, err = info.Read(ctx, node, "server")
	}
	node.Close()
	if err != nil {
		return nil, fmt.Errorf("read the cluster from %s: %w", l.cfg.Node.Addr, err)
	}
	if !top.Myself.Master() {
		return nil, fmt.Errorf("%s is not a master", l.cfg.Node.Addr)
	}
	bySource := map[string]*slots.Set{}
	ownedHere, unowned := slots.NewSet(), slots.NewSet()
	for _, s := range set.Slots() {
		switch o := top.Owner(s); {
		case o == nil:
			unowned.Add(s)
		case o.ID == top.Myself.ID:
			ownedHere.Add(s)
		default:
			if bySource[o.ID] == nil {
				bySource[o.ID] = slots.NewSet()
			}
			bySource[o.ID].Add(s)
		}
	}
	if ownedHere.Len() > 0 {
		return nil, fmt.Errorf("%w: slots %s", ErrOwnedHere, ownedHere)
	}
	if unowned.Len() > 0 {
		return nil, fmt.Errorf("%w: slots %s", ErrUnowned, unowned)
	}
	if req.From != "" {
		for _, src := range slices.Sorted(maps.Keys(bySource)) {
			if src != req.From {
				return nil, fmt.Errorf("%w: slots %s are %s's (%s), not %s's", ErrStale, bySource[src], src, top.ByID(src).Addr, req.From)
			}
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return nil, ErrShuttingDown
	}
	active := 0
	for _, id := range l.order {
		e := l.tasks[id]
		if e.rec.State != StateRunning {
			continue
		}
		active++
		if overlap := intersect(e.set, set); overlap.Len() > 0 {
			return nil, fmt.Errorf("%w: slots %s are moved by task %s", ErrOverlap, overlap, id)
		}
	}
	if active+len(bySource) > l.cfg.MaxTasks {
		return nil, fmt.Errorf("%w: %d running, %d more asked, at most %d at once", ErrTooManyTasks, active, len(bySource), l.cfg.MaxTasks)
	}
	var started []Task
	for _, src := range slices.Sorted(maps.Keys(bySource)) {
		n := top.ByID(src)
		e := &entry{set: bySource[src], budget: req.Budget, rec: Task{
			ID: newID(), Slots: bySource[src].String(), Source: src, SourceAddr: n.Addr,
			Dest: top.Myself.ID, DestAddr: l.cfg.Node.Addr, DestRunID: server["run_id"], Operation: "import",
			State: StateRunning, CreateTime: time.Now(), Snapshot: cmp.Or(req.Snapshot, l.cfg.Move.Snapshot, mover.SnapshotAuto),
		}}
		e.rec.Budget = l.cfg.Move.Budget.String()
		if req.Budget != nil {
			e.rec.Budget = req.Budget.String()
		}
		e.rec.setPhase(string(mover.PhasePreflight))
		e.rec.StartTime = e.rec.CreateTime
		l.start(e, n.Addr)
		started = append(started, e.rec)
	}
	return started, nil
}

// start runs e's move; l.mu is held.
func (l *Local) start(e *entry, sourceAddr string) {
	opts := l.cfg.Move
	opts.Source = l.cfg.Node.With(sourceAddr)
	opts.Target = l.cfg.Node
	opts.Slots = e.set
	opts.Snapshot = e.rec.Snapshot
	if e.budget != nil {
		opts.Budget = *e.budget
	}
	opts.TaskID = e.rec.ID
	opts.Logger = l.log
	opts.Progress = func(p mover.Progress) {
		change := func(t *Task) {
			t.setPhase(string(p.Phase))
			t.KeysCopied, t.BytesCopied, t.LagBytes = p.KeysCopied, p.BytesCopied, max(p.Lag, 0)
			t.held(p)
		}
		if p.Phase == mover.PhaseClaim {
			// Neither node serves the slots until the claim ends: STATUS
			// sees it, but OnChange's journal fsync and NATS round trip
			// wait for the next report.
			l.change(e.rec.ID, change)
			return
		}
		l.update(e.rec.ID, change)
	}
	l.tasks[e.rec.ID] = e
	l.order = append(l.order, e.rec.ID)
	e.move = mover.Start(l.base, opts)
	l.log.Info("task started", "task", e.rec.ID, "slots", e.rec.Slots, "source", sourceAddr)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		sum, err := e.move.Wait()
		l.update(e.rec.ID, func(t *Task) {
			t.EndTime = time.Now()
			t.setPhase(string(sum.Phase))
			t.Result = sum.Result
			t.Snapshot = cmp.Or(sum.Snapshot, t.Snapshot)
			t.SnapshotReason, t.Prediction, t.TotalMS = sum.SnapshotReason, sum.Prediction, sum.TotalMS
			t.FenceOffset, t.ReleaseOffset = sum.FenceOffset, sum.ReleaseOffset
			t.WritePauseMS, t.Retries = sum.PauseMS, max(sum.CutoverAttempts-1, 0)
			t.KeysCopied, t.BytesCopied, t.OrphansRemoved = sum.KeysCopied, sum.BytesCopied, sum.OrphansRemoved
			t.Budget, t.ThrottledMS, t.PausedMS, t.Holding, t.CutoverHeld = sum.Budget, sum.ThrottledMS, sum.PausedMS, nil, false
			switch sum.Result {
			case mover.ResultMoved:
				t.State = StateCompleted
			case mover.ResultCancelled:
				t.State = StateCanceled
			default:
				t.State = StateFailed
			}
			if err != nil {
				t.LastError = err.Error()
			}
		})
		l.log.Info("task ended", "task", e.rec.ID, "result", sum.Result, "error", err)
	}()
}

// update changes a task's record and reports the new record.
func (l *Local) update(id string, change func(*Task)) {
	rec := l.change(id, change)
	if l.cfg.OnChange != nil {
		l.cfg.OnChange(rec)
	}
}

// change changes a task's record in memory alone, and returns it.
func (l *Local) change(id string, change func(*Task)) Task {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.tasks[id]
	change(&e.rec)
	return e.rec
}

// Status returns the task with that ID, or every task (oldest first) for "".
func (l *Local) Status(id string) ([]Task, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Task
	for _, e := range l.pick(id) {
		out = append(out, e.rec)
	}
	if id != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, id)
	}
	return out, nil
}

// Cancel asks the task with that ID, or every running task for "", to stop
// and roll back, and returns those it stopped (see Manager).
func (l *Local) Cancel(id string) ([]Task, error) {
	return l.eachRunning(id, func(e *entry) error { return e.move.Cancel() })
}

// eachRunning applies act to the running task with that ID, or to every
// running task for "", and returns the records of those it acted on. An
// error of act fails the call for one ID, and skips the task for all.
func (l *Local) eachRunning(id string, act func(*entry) error) ([]Task, error) {
	l.mu.Lock()
	picked := l.pick(id)
	l.mu.Unlock()
	if id != "" && len(picked) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, id)
	}
	var out []Task
	for _, e := range picked {
		if e.move == nil { // recovered from an earlier run: over
			continue
		}
		select {
		case <-e.move.Done():
			continue
		default:
		}
		if err := act(e); err != nil {
			if id != "" {
				return nil, fmt.Errorf("task %s: %w", id, err)
			}
			continue
		}
		l.mu.Lock()
		out = append(out, e.rec)
		l.mu.Unlock()
	}
	return out, nil
}

// pick returns the task id, or every task for ""; l.mu is held.
func (l *Local) pick(id string) []*entry {
	if id != "" {
		if e := l.tasks[id]; e != nil {
			return []*entry{e}
		}
		return nil
	}
	out := make([]*entry, 0, len(l.order))
	for _, id := range l.order {
		out = append(out, l.tasks[id])
	}
	return out
}

// Control changes the running task with that ID, or every running task
// for "", and returns those it changed. A task past its release is
// changed by a pause, a resume and a budget (its cleanup holds), but not
// by a cutover hold: for one ID that is ErrTooLate.
func (l *Local) Control(id string, c Control) ([]Task, error) {
	return l.eachRunning(id, func(e *entry) error {
		switch c.Action {
		case ActionPause:
			e.move.Pause()
		case ActionResume:
			e.move.Resume()
		case ActionHoldCutover, ActionReleaseCutover:
			if err := e.move.HoldCutover(c.Action == ActionHoldCutover); err != nil {
				return err
			}
		case ActionBudget:
			e.move.SetBudget(c.Budget)
		default:
			return fmt.Errorf("%w: unknown action %q", ErrBadControl, c.Action)
		}
		l.log.Info("task controlled", "task", e.rec.ID, "action", c.Action, "budget", c.Budget)
		p := e.move.Progress()
		l.update(e.rec.ID, func(t *Task) { t.held(p) })
		return nil
	})
}

// Close refuses new tasks and cancels the running ones: copies roll back,
// a task past its release finishes its cutover. It waits for them until
// ctx ends, then stops what is left (a cleanup under way ends stuck, for
// fix) and waits for that.
func (l *Local) Close(ctx context.Context) {
	l.mu.Lock()
	l.closing = true
	picked := l.pick("")
	l.mu.Unlock()
	for _, e := range picked {
		if e.move != nil {
			e.move.Cancel()
		}
	}
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		l.stop()
		<-done
	}
	l.stop()
}

func intersect(a, b *slots.Set) *slots.Set {
	out := slots.NewSet()
	for _, s := range a.Slots() {
		if b.Contains(s) {
			out.Add(s)
		}
	}
	return out
}

func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setPhase records the task's phase, and its start in the history.
// held takes the move's budget and holds from its progress.
func (t *Task) held(p mover.Progress) {
	t.Budget, t.Holding, t.CutoverHeld = p.Budget, p.Holding, p.CutoverHeld
	t.ThrottledMS, t.PausedMS = p.Throttled.Milliseconds(), p.Paused.Milliseconds()
}

func (t *Task) setPhase(p string) {
	if t.Phase == p {
		return
	}
	t.Phase = p
	t.Phases = append(t.Phases, PhaseChange{Phase: p, At: time.Now()})
}

// Recover takes the records of an earlier run of this sidecar (from the KV
// bucket): those that ended are kept for Status; those left running (the
// sidecar died mid-move) or stuck (stopped in their cleanup at shutdown)
// are repaired with the logic of slotmover fix on their slots. One ends
// completed only if the local master owns every slot afterwards and fix
// left nothing behind, rolled_back if the source owns them all again with
// nothing left, and stuck otherwise, with fix's notes. It returns the
// records as they end up.
func (l *Local) Recover(ctx context.Context, recs []Task) []Task {
	out := make([]Task, 0, len(recs))
	for _, rec := range recs {
		if !rec.Over() || rec.Result == mover.ResultStuck {
			rec = l.repair(ctx, rec)
		}
		l.mu.Lock()
		if l.tasks[rec.ID] == nil {
			set, _ := slots.Parse(rec.Slots)
			l.tasks[rec.ID] = &entry{rec: rec, set: set}
			l.order = append(l.order, rec.ID)
		}
		l.mu.Unlock()
		out = append(out, rec)
	}
	return out
}

// repair finishes or undoes an interrupted task with fix.Run.
func (l *Local) repair(ctx context.Context, rec Task) Task {
	prior := rec.LastError
	rec.EndTime = time.Now()
	rec.State = StateFailed
	set, err := slots.Parse(rec.Slots)
	if err != nil {
		rec.LastError = fmt.Sprintf("interrupted; its slots %q cannot be read: %v", rec.Slots, err)
		return rec
	}
	// The local master took the slots over, if it did, only once it held
	// every key: while its run ID is the one it had when the task began,
	// fix may take a slot it emptied since for emptied, not lost.
	var held []fix.Held
	if rec.DestRunID != "" {
		held = []fix.Held{{Owner: rec.Dest, RunID: rec.DestRunID, Slots: set}}
	}
	repairs, notes, err := fix.Run(ctx, fix.Options{Seed: l.cfg.Node, Slots: set, Cleanup: l.cfg.Move.Cleanup, ReplicaWait: l.cfg.Move.ReplicaWait, Held: held, Logger: l.log})
	if err != nil {
		rec.LastError = fmt.Sprintf("interrupted; fix could not repair it (run slotmover fix --cluster %s --slots %s): %v", l.cfg.Node.Addr, rec.Slots, err)
		return rec
	}
	node := l.cfg.Node.Client()
	top, err := cluster.Load(ctx, node)
	node.Close()
	if err != nil {
		rec.LastError = fmt.Sprintf("interrupted and repaired (%d repairs), but the owner cannot be read: %v", len(repairs), err)
		return rec
	}
	here, back := true, true
	for _, s := range set.Slots() {
		o := top.Owner(s)
		here = here && o != nil && o.ID == top.Myself.ID
		back = back && o != nil && o.ID == rec.Source
	}
	rec.LastError = fmt.Sprintf("interrupted (the sidecar stopped in phase %s); repaired by fix with %d repairs", rec.Phase, len(repairs))
	if rec.Result == mover.ResultStuck {
		rec.LastError = fmt.Sprintf("stuck (%s); repaired by fix at the next start with %d repairs", prior, len(repairs))
	}
	switch {
	case len(notes) > 0:
		rec.Result = mover.ResultStuck
		rec.LastError += fmt.Sprintf("; left to an operator (run slotmover fix --cluster %s --slots %s once checked): %s", l.cfg.Node.Addr, rec.Slots, strings.Join(notes, "; "))
	case here:
		rec.State, rec.Result = StateCompleted, mover.ResultMoved
	case back:
		rec.Result = mover.ResultRolledBack
	default:
		rec.Result = mover.ResultStuck
		rec.LastError += "; but neither the local master nor the source owns every slot"
	}
	rec.setPhase("repaired")
	l.log.Info("interrupted task repaired", "task", rec.ID, "slots", rec.Slots, "state", rec.State, "repairs", len(repairs))
	return rec
}
