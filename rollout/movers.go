package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// Check tells whether the plan still matches the cluster for move m: the
// source (the same node, still a master) owns every slot of the move in
// its own view, with none migrating, and the target is still that master.
// conn reaches a node by its address. It changes nothing.
func Check(ctx context.Context, conn func(addr string) (cluster.Conn, error), m planner.Move) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	set, err := slots.Parse(m.Slots)
	if err != nil {
		return err
	}
	self := func(addr, id, role string) (*cluster.Topology, error) {
		c, err := conn(addr)
		if err != nil {
			return nil, err
		}
		cl := c.Client()
		defer cl.Close()
		top, err := cluster.Load(ctx, cl)
		if err != nil {
			return nil, err
		}
		switch {
		case top.Myself.ID != id:
			return nil, fmt.Errorf("the %s %s is now node %s, not %s", role, addr, top.Myself.ID, id)
		case !top.Myself.Master():
			return nil, fmt.Errorf("the %s %s is no longer a master (flags %s)", role, addr, strings.Join(top.Myself.Flags, ","))
		}
		return top, nil
	}
	src, err := self(m.Source, m.SourceID, "source")
	if err != nil {
		return err
	}
	if _, err := self(m.Target, m.TargetID, "target"); err != nil {
		return err
	}
	var gone slots.Set
	owners := map[string]bool{}
	for _, s := range set.Slots() {
		if !src.Myself.Slots.Contains(s) {
			gone.Add(s)
			if o := src.AssignedTo(s); o != nil {
				owners[o.Addr] = true
			} else {
				owners["nobody"] = true
			}
		}
	}
	if gone.Len() > 0 {
		var who []string
		for o := range owners {
			who = append(who, o)
		}
		return fmt.Errorf("the plan is stale: the source %s no longer owns slots %s of this move (now %s, by its view); plan again", m.Source, gone.String(), strings.Join(who, ", "))
	}
	for _, s := range set.Slots() {
		if id, ok := src.Myself.Migrating[s]; ok {
			return fmt.Errorf("slot %d is migrating on the source to %s: another move is under way (or stopped half-way: slotmover fix)", s, id)
		}
	}
	return nil
}

// Local runs each move here, as `slotmover move` does.
type Local struct {
	Conn     func(addr string) (cluster.Conn, error) // reaches a node by its address
	Snapshot string                                  // each move's snapshot path ("" for auto)
	Budget   throttle.Budget
	Logger   func(n int) *slog.Logger // move n's log; nil for slog.Default
}

// Move runs o's move here.
func (l Local) Move(ctx context.Context, o *Outcome, progress func(mover.Progress)) mover.Phase {
	m := o.Move
	set, err := slots.Parse(m.Slots)
	src, serr := l.Conn(m.Source)
	tgt, terr := l.Conn(m.Target)
	if err := errors.Join(err, serr, terr); err != nil {
		o.Result, o.Err = mover.ResultRefused, err.Error()
		return mover.PhasePreflight
	}
	log := slog.Default()
	if l.Logger != nil {
		log = l.Logger(o.N)
	}
	opts := mover.Options{Source: src, Target: tgt, Slots: set, Logger: log, Snapshot: l.Snapshot, Budget: l.Budget, Progress: progress}
	sum, err := mover.Run(ctx, opts)
	o.Result, o.Keys, o.Total, o.Pause, o.Throttled, o.Repair = sum.Result, sum.KeysCopied, sum.TotalMS, sum.PauseMS, sum.ThrottledMS, sum.Repair
	if err != nil {
		o.Err = err.Error()
	}
	return sum.Phase
}

// Sidecars runs each move on its target's sidecar, over NATS.
type Sidecars struct {
	Bus      *natsapi.Client
	Snapshot string           // each move's snapshot path; "" keeps each sidecar's setting
	Budget   *throttle.Budget // nil keeps each sidecar's setting
}

// cancelGrace bounds the wait for a cancelled task's end.
const cancelGrace = 2 * time.Minute

// Move asks o's target's sidecar to import the slots from o's source,
// follows the task until it ends, and returns its last phase. Cancelled,
// it cancels the task and waits for its end (a task past its source's
// release finishes).
func (s Sidecars) Move(ctx context.Context, o *Outcome, progress func(mover.Progress)) mover.Phase {
	m := o.Move
	req := natsapi.ImportRequest{Slots: m.Slots, Source: m.SourceID, Snapshot: s.Snapshot}
	if s.Budget != nil {
		req.Budget = s.Budget.String()
	}
	tasks, err := s.Bus.Import(ctx, m.TargetID, req)
	var refused *natsapi.Error
	// A sidecar at its tasks.max takes the move when one of its tasks ends.
	for deadline := time.Now().Add(time.Hour); errors.As(err, &refused) && refused.Code == "too_many_tasks" && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			o.Result, o.Err = ResultSkipped, "cancelled while the target's sidecar was busy"
			return mover.PhasePreflight
		case <-time.After(500 * time.Millisecond):
		}
		tasks, err = s.Bus.Import(ctx, m.TargetID, req)
	}
	switch {
	case errors.As(err, &refused) && (refused.Code == "stale" || refused.Code == "owned_here" || refused.Code == "unowned"):
		o.Result, o.Err = ResultStale, "the plan is stale: "+refused.Message+"; plan again"
		return mover.PhasePreflight
	case err != nil:
		o.Result, o.Err = ResultRefused, fmt.Sprintf("the sidecar of %s (%s): %v", m.Target, m.TargetID, err)
		return mover.PhasePreflight
	case len(tasks) != 1:
		o.Result, o.Err = ResultRefused, fmt.Sprintf("the sidecar of %s started %d tasks for one source", m.Target, len(tasks))
		return mover.PhasePreflight
	}
	t := tasks[0]
	o.Task = t.ID
	follow := context.WithoutCancel(ctx) // to see the end of a cancelled task
	cancelled, failures := false, 0
	for deadline := time.Now().Add(24 * time.Hour); !t.Over() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			if !cancelled {
				cancelled = true
				// Refused when the task is past its source's release (it
				// finishes) or over: either way, its end is what follows.
				s.Bus.Cancel(follow, m.TargetID, t.ID)
				deadline = time.Now().Add(cancelGrace)
			}
		case <-time.After(250 * time.Millisecond):
		}
		got, err := s.Bus.Status(follow, m.TargetID, t.ID)
		if err != nil || len(got) != 1 {
			// The task goes on without us; a sidecar gone for a minute is
			// reported, and `slotmover status` follows the task from there.
			if failures++; failures > 240 {
				o.Result, o.Err = ResultLost, fmt.Sprintf("task %s on %s: no status for a minute (%v): it may still run (slotmover status %s --nats …)", t.ID, m.TargetID, err, t.ID)
				return mover.Phase(t.Phase)
			}
			continue
		}
		failures, t = 0, got[0]
		progress(mover.Progress{Phase: mover.Phase(t.Phase), KeysCopied: t.KeysCopied, BytesCopied: t.BytesCopied, Elapsed: time.Since(t.StartTime),
			Throttled: time.Duration(t.ThrottledMS) * time.Millisecond})
	}
	if !t.Over() {
		o.Result, o.Err = ResultLost, fmt.Sprintf("task %s on %s still running", t.ID, m.TargetID)
		return mover.Phase(t.Phase)
	}
	o.Result, o.Keys, o.Pause, o.Throttled, o.Err = t.Result, t.KeysCopied, t.WritePauseMS, t.ThrottledMS, t.LastError
	o.Start, o.End = t.StartTime, t.EndTime
	o.Total = t.EndTime.Sub(t.StartTime).Milliseconds()
	return mover.Phase(t.Phase)
}
