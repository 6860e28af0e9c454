// Package sidecar is the long-running side of slotmover: next to a master,
// it runs imports of slots into it as tasks (one per source), several at
// once up to a limit, and answers for them on its admin port and on NATS.
// This file holds what those front ends share: the task record and the
// Manager they drive.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// States of a task, named as Redis 8.4's CLUSTER MIGRATION STATUS names them.
const (
	StateRunning   = "running"   // copying, catching up or cutting over
	StateCompleted = "completed" // moved; the source's copies cleaned up
	StateFailed    = "failed"    // rolled back: the cluster is as it was (or stuck: see LastError)
	StateCanceled  = "canceled"  // rolled back on request
)

// Task is one import's record: what the admin port's STATUS and the NATS
// status reply show, and what the KV bucket keeps.
type Task struct {
	ID         string `json:"id"`
	Slots      string `json:"slots"`  // slot spec, "0-5460,6000"
	Source     string `json:"source"` // the source master's node ID
	SourceAddr string `json:"source_addr"`
	Dest       string `json:"dest"` // the local master's node ID
	DestAddr   string `json:"dest_addr"`
	// DestRunID is the local master's run_id when the task began: after a
	// crash past the claim, what tells fix it has not restarted since.
	DestRunID string `json:"dest_run_id,omitempty"`
	Operation string `json:"operation"` // "import"
	State     string `json:"state"`
	Phase     string `json:"phase"`    // the mover's phase (preflight … cleanup, done)
	Snapshot  string `json:"snapshot"` // how the keys are first copied: the setting, then the path taken (rdb, keys)
	// SnapshotReason says why that path, and Prediction what the cost
	// model predicted of each (beside TotalMS, what the move took).
	SnapshotReason string                `json:"snapshot_reason,omitempty"`
	Prediction     *mover.PathPrediction `json:"prediction,omitempty"`
	TotalMS        int64                 `json:"total_ms,omitempty"`
	Result         string                `json:"result,omitempty"` // the mover's result once over (moved, rolled_back, stuck…)
	LastError      string                `json:"last_error,omitempty"`
	Retries        int                   `json:"retries"` // cutover attempts beyond the first
	CreateTime     time.Time             `json:"create_time"`
	StartTime      time.Time             `json:"start_time,omitzero"`
	EndTime        time.Time             `json:"end_time,omitzero"`

	WritePauseMS   float64 `json:"write_pause_ms"`
	KeysCopied     int64   `json:"keys_copied"`
	BytesCopied    int64   `json:"bytes_copied"`
	LagBytes       int64   `json:"lag_bytes"`
	OrphansRemoved int64   `json:"orphans_removed"` // cleanup progress on the source
	FenceOffset    int64   `json:"fence_offset,omitempty"`
	ReleaseOffset  int64   `json:"release_offset,omitempty"`

	// The impact budget (throttle.Budget's words), what holds the move
	// now, the time it was held over budget and by an operator, and
	// whether its cutover waits for a release.
	Budget      string   `json:"budget"`
	Holding     []string `json:"holding,omitempty"`
	ThrottledMS int64    `json:"throttled_ms"`
	PausedMS    int64    `json:"paused_ms"`
	CutoverHeld bool     `json:"cutover_held"`

	Phases []PhaseChange `json:"phases"` // the mover's phases, with when each began
}

// PhaseChange is one entry of a task's phase history.
type PhaseChange struct {
	Phase string    `json:"phase"`
	At    time.Time `json:"at"`
}

// Over reports whether the task has ended.
func (t Task) Over() bool { return t.State != StateRunning }

// Manager runs the tasks. Import splits slots by their current owners
// into one task per source and starts them (its ctx bounds the call, not
// the tasks). Status and Cancel take a task ID, or "" for every task.
// Cancel returns the tasks it stopped: not those that had ended, nor
// those whose source had released the slots already, which go on to the
// end (for one ID, that is ErrTooLate).
type Manager interface {
	Import(ctx context.Context, req Request) ([]Task, error)
	Status(id string) ([]Task, error)
	Cancel(id string) ([]Task, error)
	// Control changes running tasks (see Control) and returns those it
	// changed.
	Control(id string, c Control) ([]Task, error)
}

// Control is an operator's change to a running task.
type Control struct {
	Action Action
	Budget throttle.Budget // for ActionBudget
}

// Action is what a Control does.
type Action string

const (
	ActionPause          Action = "pause"           // hold the copy, the cutover and the cleanup
	ActionResume         Action = "resume"          // undo a pause
	ActionHoldCutover    Action = "hold-cutover"    // keep the target caught up, but do not cut over
	ActionReleaseCutover Action = "release-cutover" // let a held cutover go
	ActionBudget         Action = "budget"          // set the impact budget
)

// Actions lists every Action, for front ends' checks and help.
var Actions = []Action{ActionPause, ActionResume, ActionHoldCutover, ActionReleaseCutover, ActionBudget}

// ParseControl reads an action's name (and a budget for ActionBudget, in
// throttle.ParseBudget's words).
func ParseControl(action, budget string) (Control, error) {
	a := Action(strings.ToLower(action))
	if !slices.Contains(Actions, a) {
		return Control{}, fmt.Errorf("%w: unknown action %q (want one of %v)", ErrBadControl, action, Actions)
	}
	c := Control{Action: a}
	if a == ActionBudget {
		b, err := throttle.ParseBudget(budget)
		if err != nil {
			return Control{}, fmt.Errorf("%w: %w", ErrBadControl, err)
		}
		c.Budget = b
	} else if budget != "" {
		return Control{}, fmt.Errorf("%w: %s takes no budget", ErrBadControl, a)
	}
	return c, nil
}

// Request asks a Manager for an import.
type Request struct {
	Slots *slots.Set
	// From, if set, is the node ID the slots must come from: a slot that
	// another master owns refuses the request (ErrStale). A planned move
	// names its source, and a plan made before the slots moved elsewhere
	// must not take them from whoever holds them now.
	From string
	// Snapshot chooses how the move first copies the keys (auto, rdb or
	// keys); "" keeps the manager's setting.
	Snapshot string
	// Budget, if set, is the move's budget instead of the manager's.
	Budget *throttle.Budget
}

// Errors a Manager answers with, which the front ends turn into their own
// error replies (a RESP error, a JSON error with a code).
var (
	ErrUnknownTask  = errors.New("no such task")
	ErrOverlap      = errors.New("slots overlap a running task")
	ErrOwnedHere    = errors.New("the local master owns these slots already")
	ErrUnowned      = errors.New("no master owns these slots")
	ErrTooManyTasks = errors.New("too many tasks")
	ErrShuttingDown = errors.New("shutting down: no new tasks")
	ErrTooLate      = mover.ErrTooLate
	ErrStale        = errors.New("the slots are not the expected source's")
	ErrBadControl   = errors.New("bad control")
)
