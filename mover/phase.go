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
	PhaseCutover   Phase = "cutover"   // write pause, fence, ownership switch
	PhaseCleanup   Phase = "cleanup"   // removing the orphaned keys from the source
	PhaseRollback  Phase = "rollback"  // undoing the target side after a failure
	PhaseDone      Phase = "done"      // moved
	PhaseFailed    Phase = "failed"    // rolled back: the cluster is as it was
	PhaseCancelled Phase = "cancelled" // rolled back on request
	PhaseStuck     Phase = "stuck"     // failed in a state it could not undo itself
)

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

// Machine holds a move's phase and the facts its transitions depend on.
type Machine struct {
	Phase       Phase
	Attempts    int // cutover attempts made
	MaxAttempts int
	Released    bool  // the source gave the slots away
	Cause       error // why the move failed, for failed/stuck
	cancelled   bool
}

// NewMachine starts a move in preflight.
func NewMachine(maxAttempts int) *Machine {
	return &Machine{Phase: PhasePreflight, MaxAttempts: max(maxAttempts, 1)}
}

// Transition is one step of the machine, for the log.
type Transition struct {
	From, To Phase
	Event    Event
}

// Step applies an event. err is the cause for EvFailed and EvFenceMissed.
// An event that makes no sense in the current phase is an error and changes
// nothing.
func (m *Machine) Step(ev Event, err error) (Transition, error) {
	from := m.Phase
	to, serr := m.next(ev, err)
	if serr != nil {
		return Transition{}, serr
	}
	m.Phase = to
	return Transition{From: from, To: to, Event: ev}, nil
}

func (m *Machine) next(ev Event, err error) (Phase, error) {
	if m.Phase.Terminal() {
		return "", fmt.Errorf("move is %s: event %q after the end", m.Phase, ev)
	}
	switch ev {
	case EvFailed, EvCancel:
		return m.abort(ev, err)
	case EvRefused:
		if m.Phase != PhaseImporting {
			break
		}
		m.Cause = err
		return PhaseFailed, nil
	case EvRolledBack:
		if m.Phase != PhaseRollback {
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
		EvSwitched:        PhaseCutover,
		EvCleanupDone:     PhaseCleanup,
	}
	if p, ok := want[ev]; !ok || p != m.Phase {
		return "", fmt.Errorf("event %q makes no sense in phase %s", ev, m.Phase)
	}
	switch ev {
	case EvPreflightPassed:
		return PhaseImporting, nil
	case EvImportingSet:
		return PhaseSnapshot, nil
	case EvSnapshotApplied:
		return PhaseCatchUp, nil
	case EvLagLow:
		m.Attempts++
		return PhaseCutover, nil
	case EvFenceMissed:
		if m.Released {
			return "", fmt.Errorf("fence missed after the source released the slots")
		}
		if m.Attempts >= m.MaxAttempts {
			m.Cause = fmt.Errorf("cutover failed %d times, last: %w", m.Attempts, err)
			return PhaseRollback, nil
		}
		return PhaseCatchUp, nil
	case EvSourceReleased:
		m.Released = true
		return PhaseCutover, nil
	case EvSwitched:
		if !m.Released {
			return "", fmt.Errorf("ownership switched before the source released the slots")
		}
		return PhaseCleanup, nil
	default: // EvCleanupDone
		return PhaseDone, nil
	}
}

// abort handles a failure or a cancel request.
func (m *Machine) abort(ev Event, err error) (Phase, error) {
	if ev == EvCancel {
		if m.Released {
			return "", ErrTooLate
		}
		m.cancelled = true
		err = errors.New("cancelled")
	}
	if err == nil {
		err = errors.New("unknown failure")
	}
	switch {
	case m.Phase == PhaseRollback:
		// The undo itself failed: what is left needs a person (or fix).
		m.Cause = fmt.Errorf("%w; rollback failed: %w", m.Cause, err)
		return PhaseStuck, nil
	case m.Released:
		m.Cause = err
		return PhaseStuck, nil
	case m.Phase == PhasePreflight:
		m.Cause = err
		if m.cancelled {
			return PhaseCancelled, nil
		}
		return PhaseFailed, nil
	default:
		m.Cause = err
		return PhaseRollback, nil
	}
}
