package mover

import (
	"errors"
	"fmt"
)

// Phase is where a move stands. The phases and every way between them live
// here, in a machine that does no I/O: the task drives it and does the work
// each phase names.
type Phase string

const (
	PhasePreflight Phase = "preflight" // checking, nothing changed yet
	PhaseImporting Phase = "importing" // marking the slots IMPORTING on the target
	PhaseSnapshot  Phase = "snapshot"  // full sync: RDB keys of the slots onto the target
	PhaseCatchUp   Phase = "catchup"   // applying the command stream until the lag is small
	PhaseCutover   Phase = "cutover"   // write pause, fence, the source's release
	PhaseClaim     Phase = "claim"     // released: the target claims the slots, the source unpaused
	PhaseCleanup   Phase = "cleanup"   // removing the orphaned keys from the source
	PhaseRollback  Phase = "rollback"  // undoing the target side after a failure
	PhaseDone      Phase = "done"      // moved
	PhaseFailed    Phase = "failed"    // rolled back: the cluster is as it was
	PhaseCancelled Phase = "cancelled" // rolled back on request
	PhaseStuck     Phase = "stuck"     // failed in a state it could not undo itself
)

// Cancellable says whether the phase's work stops when the move is
// cancelled: every phase but the claim and the cleanup, which run once the
// source has given the slots away and only go forward.
func (p Phase) Cancellable() bool { return p != PhaseClaim && p != PhaseCleanup }

// Terminal reports whether the move is over.
func (p Phase) Terminal() bool {
	return p == PhaseDone || p == PhaseFailed || p == PhaseCancelled || p == PhaseStuck
}

// Event is what the task reports to the machine.
type Event string

const (
	EvPreflightPassed Event = "preflight passed"
	EvImportingSet    Event = "importing set"
	EvSnapshotApplied Event = "snapshot applied"
	EvLagLow          Event = "lag below threshold"
	EvFenceMissed     Event = "fence missed"    // the pause ended before the fence: unpaused, try again
	EvSourceReleased  Event = "source released" // the source gave the slots away: no way back from here
	EvSwitched        Event = "ownership switched"
	EvCleanupDone     Event = "cleanup done"
	EvFailed          Event = "failed"
	EvRefused         Event = "refused" // the target refused the importing marks as a whole: nothing changed
	EvCancel          Event = "cancel"
	EvRolledBack      Event = "rolled back"
)

// ErrTooLate answers a cancel once the source has given the slots away.
var ErrTooLate = errors.New("the source has released the slots: the move can only go forward")

// ErrRollingBack answers a cancel while the move is being rolled back
// already: it ends failed as it would have.
var ErrRollingBack = errors.New("the move is being rolled back already")

// ErrRefusedTransition is the cause of a move failed by an event that made
// no sense in its phase: a bug of the driver, on whose premise nothing more
// may be done.
var ErrRefusedTransition = errors.New("refused transition")

// Machine holds a move's phase and the facts its transitions depend on. It
// alone decides what comes next, and what the move's result is.
type Machine struct {
	phase       Phase
	attempts    int // cutover attempts made
	maxAttempts int
	released    bool  // the source gave the slots away
	switched    bool  // the target claimed them
	refused     bool  // ended before any change, on bad input
	cancelled   bool  // rolled back (or stuck) on request
	cause       error // why the move failed, for failed/cancelled/stuck
}

// NewMachine starts a move in preflight.
func NewMachine(maxAttempts int) *Machine {
	return &Machine{phase: PhasePreflight, maxAttempts: max(maxAttempts, 1)}
}

// Phase is where the move stands.
func (m *Machine) Phase() Phase { return m.phase }

// Attempts counts the cutover attempts made.
func (m *Machine) Attempts() int { return m.attempts }

// Released says whether the source gave the slots away: from then on the
// move only goes forward.
func (m *Machine) Released() bool { return m.released }

// Switched says whether the target claimed the slots.
func (m *Machine) Switched() bool { return m.switched }

// Cause is why the move failed, was refused or cancelled; nil otherwise.
func (m *Machine) Cause() error { return m.cause }

// Result names how a move ended: ResultMoved, ResultRefused,
// ResultRolledBack, ResultCancelled or ResultStuck; "" while it runs.
func (m *Machine) Result() string {
	switch m.phase {
	case PhaseDone:
		return ResultMoved
	case PhaseCancelled:
		return ResultCancelled
	case PhaseStuck:
		return ResultStuck
	case PhaseFailed:
		if m.refused {
			return ResultRefused
		}
		return ResultRolledBack
	}
	return ""
}

// Transition is one step of the machine, for the log.
type Transition struct {
	From, To Phase
	Event    Event
}

// Step applies an event; err is its cause, for EvFailed, EvRefused,
// EvCancel and EvFenceMissed, and for EvSourceReleased the error of a
// release that went half-way (the move is stuck). An event that makes no sense in the current
// phase fails the move (ErrRefusedTransition), as a failure there would,
// and is returned as an error along with that transition. Events after
// the end, and a cancel once the source released the slots (ErrTooLate) or
// during the rollback (ErrRollingBack), are answered with an error and
// change nothing.
func (m *Machine) Step(ev Event, err error) (Transition, error) {
	from := m.phase
	if from.Terminal() {
		return Transition{}, fmt.Errorf("move is %s: event %q after the end", from, ev)
	}
	if ev == EvCancel && m.released {
		return Transition{}, ErrTooLate
	}
	if ev == EvCancel && from == PhaseRollback {
		return Transition{}, ErrRollingBack
	}
	to, serr := m.next(ev, err)
	if serr != nil {
		serr = fmt.Errorf("%w: %w", ErrRefusedTransition, serr)
		to = m.abort(EvFailed, serr)
	}
	m.phase = to
	return Transition{From: from, To: to, Event: ev}, serr
}

func (m *Machine) next(ev Event, err error) (Phase, error) {
	switch ev {
	case EvFailed, EvCancel:
		return m.abort(ev, err), nil
	case EvRefused:
		if m.phase != PhasePreflight && m.phase != PhaseImporting {
			break
		}
		m.refused, m.cause = true, orUnknown(err)
		return PhaseFailed, nil
	case EvRolledBack:
		if m.phase != PhaseRollback {
			break
		}
		if m.cancelled {
			return PhaseCancelled, nil
		}
		return PhaseFailed, nil
	}
	want := map[Event]Phase{
		EvPreflightPassed: PhasePreflight,
		EvImportingSet:    PhaseImporting,
		EvSnapshotApplied: PhaseSnapshot,
		EvLagLow:          PhaseCatchUp,
		EvFenceMissed:     PhaseCutover,
		EvSourceReleased:  PhaseCutover,
		EvSwitched:        PhaseClaim,
		EvCleanupDone:     PhaseCleanup,
	}
	if p, ok := want[ev]; !ok || p != m.phase {
		return "", fmt.Errorf("event %q makes no sense in phase %s", ev, m.phase)
	}
	switch ev {
	case EvPreflightPassed:
		return PhaseImporting, nil
	case EvImportingSet:
		return PhaseSnapshot, nil
	case EvSnapshotApplied:
		return PhaseCatchUp, nil
	case EvLagLow:
		m.attempts++
		return PhaseCutover, nil
	case EvFenceMissed:
		if m.attempts >= m.maxAttempts {
			m.cause = fmt.Errorf("cutover failed %d times, last: %w", m.attempts, orUnknown(err))
			return PhaseRollback, nil
		}
		return PhaseCatchUp, nil
	case EvSourceReleased:
		m.released = true
		if err != nil { // released half-way: nothing safe is left to do
			m.cause = err
			return PhaseStuck, nil
		}
		return PhaseClaim, nil
	case EvSwitched:
		m.switched = true
		return PhaseCleanup, nil
	default: // EvCleanupDone
		return PhaseDone, nil
	}
}

// Failure names the event of the current phase's work ending in err:
// EvCancel when the move was asked to stop (cancelRequested; err may be
// what stopping did to a connection) while the source still holds the
// slots; EvRefused for bad input (an InputError) found before anything
// changed; else EvFailed.
func (m *Machine) Failure(err error, cancelRequested bool) Event {
	var input *InputError
	switch {
	case cancelRequested && !m.released:
		return EvCancel
	case errors.As(err, &input) && (m.phase == PhasePreflight || m.phase == PhaseImporting):
		return EvRefused
	}
	return EvFailed
}

// abort handles a failure or a cancel request.
func (m *Machine) abort(ev Event, err error) Phase {
	if ev == EvCancel {
		m.cancelled = true
		if err == nil {
			err = errors.New("cancelled")
		}
	}
	err = orUnknown(err)
	switch {
	case m.phase == PhaseRollback:
		// The undo itself failed: what is left needs a person (or fix).
		m.cause = fmt.Errorf("%w; rollback failed: %w", m.cause, err)
		return PhaseStuck
	case m.released:
		m.cause = err
		return PhaseStuck
	case m.phase == PhasePreflight:
		m.cause = err
		if m.cancelled {
			return PhaseCancelled
		}
		return PhaseFailed
	default:
		m.cause = err
		return PhaseRollback
	}
}

func orUnknown(err error) error {
	if err == nil {
		return errors.New("unknown failure")
	}
	return err
}
