package mover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

type step struct {
	ev   Event
	want Phase
}

func run(t *testing.T, m *Machine, steps []step) {
	t.Helper()
	for i, s := range steps {
		before := m.Phase()
		cause := errors.New("boom")
		if s.ev == EvSourceReleased {
			cause = nil // with a cause, a release that went half-way
		}
		tr, err := m.Step(s.ev, cause)
		if err != nil {
			t.Fatalf("step %d: %q in %s: %v", i, s.ev, before, err)
		}
		if m.Phase() != s.want || tr.From != before || tr.To != s.want {
			t.Fatalf("step %d: %q in %s went to %s, want %s", i, s.ev, before, m.Phase(), s.want)
		}
	}
}

// at drives a new machine to phase p the normal way.
func at(t *testing.T, p Phase) *Machine {
	t.Helper()
	m := NewMachine(3)
	path := []Event{EvPreflightPassed, EvImportingSet, EvSnapshotApplied, EvLagLow, EvSourceReleased, EvSwitched}
	for _, ev := range path {
		if m.Phase() == p {
			break
		}
		if _, err := m.Step(ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	if m.Phase() != p {
		t.Fatalf("could not reach %s: at %s", p, m.Phase())
	}
	return m
}

func TestHappyPath(t *testing.T) {
	m := NewMachine(3)
	run(t, m, []step{
		{EvPreflightPassed, PhaseImporting},
		{EvImportingSet, PhaseSnapshot},
		{EvSnapshotApplied, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvFenceMissed, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvSourceReleased, PhaseClaim},
		{EvSwitched, PhaseCleanup},
		{EvCleanupDone, PhaseDone},
	})
	if !m.Released() || !m.Switched() || m.Result() != ResultMoved || m.Cause() != nil || m.Attempts() != 2 {
		t.Fatalf("result %q, cause %v, attempts %d", m.Result(), m.Cause(), m.Attempts())
	}
}

// An event that makes no sense where the move stands is a bug of the
// driver: the move fails as it would on a failure there (no change yet:
// failed; changes to undo: rollback; released: stuck), with the refusal
// as its cause.
func TestRefusedTransitionFailsTheMove(t *testing.T) {
	for _, c := range []struct {
		at   Phase
		ev   Event
		want Phase
	}{
		{PhasePreflight, EvSnapshotApplied, PhaseFailed},
		{PhasePreflight, EvRolledBack, PhaseFailed},
		{PhaseImporting, EvPreflightPassed, PhaseRollback},
		{PhaseSnapshot, EvLagLow, PhaseRollback},
		{PhaseSnapshot, EvRefused, PhaseRollback},
		{PhaseCatchUp, EvSwitched, PhaseRollback},
		{PhaseCutover, EvSwitched, PhaseRollback}, // never before the source released
		{PhaseClaim, EvFenceMissed, PhaseStuck},
		{PhaseClaim, EvSourceReleased, PhaseStuck},
		{PhaseClaim, EvRefused, PhaseStuck},
		{PhaseCleanup, EvLagLow, PhaseStuck},
	} {
		m := at(t, c.at)
		tr, err := m.Step(c.ev, nil)
		if !errors.Is(err, ErrRefusedTransition) || m.Phase() != c.want || tr.To != c.want || !errors.Is(m.Cause(), ErrRefusedTransition) {
			t.Errorf("%q in %s: %v, to %s (cause %v), want %s", c.ev, c.at, err, m.Phase(), m.Cause(), c.want)
		}
	}
}

// After the end, events change nothing.
func TestEventsAfterTheEndChangeNothing(t *testing.T) {
	m := NewMachine(3)
	run(t, m, []step{{EvFailed, PhaseFailed}})
	for _, ev := range []Event{EvPreflightPassed, EvFailed, EvCancel, EvRolledBack} {
		if _, err := m.Step(ev, nil); err == nil || m.Phase() != PhaseFailed {
			t.Fatalf("%q after the end: %v, now %s", ev, err, m.Phase())
		}
	}
}

func TestFailureBeforeAnyChangeNeedsNoRollback(t *testing.T) {
	m := NewMachine(3)
	run(t, m, []step{{EvFailed, PhaseFailed}})
	if m.Cause() == nil || m.Result() != ResultRolledBack {
		t.Fatalf("cause %v, result %q", m.Cause(), m.Result())
	}
}

// A refusal (bad input, or importing marks the target refused as a whole)
// leaves nothing to undo: the move ends refused.
func TestRefusalsNeedNoRollback(t *testing.T) {
	for _, p := range []Phase{PhasePreflight, PhaseImporting} {
		m := at(t, p)
		run(t, m, []step{{EvRefused, PhaseFailed}})
		if m.Result() != ResultRefused || m.Cause() == nil {
			t.Fatalf("refused in %s: result %q, cause %v", p, m.Result(), m.Cause())
		}
	}
}

func TestFailuresRollBack(t *testing.T) {
	for _, p := range []Phase{PhaseImporting, PhaseSnapshot, PhaseCatchUp, PhaseCutover} {
		m := at(t, p)
		run(t, m, []step{{EvFailed, PhaseRollback}, {EvRolledBack, PhaseFailed}})
		if m.Result() != ResultRolledBack {
			t.Fatalf("failed in %s: result %q", p, m.Result())
		}
	}
}

// Cancel at every phase: before any change it ends cancelled at once;
// with changes to undo, after the rollback; once the source released the
// slots (and during a rollback already under way) it is refused and the
// move goes on.
func TestCancelAtEveryPhase(t *testing.T) {
	for _, c := range []struct {
		at   Phase
		want Phase // right after the cancel
		end  Phase // after the rollback, if any
		err  error
	}{
		{PhasePreflight, PhaseCancelled, PhaseCancelled, nil},
		{PhaseImporting, PhaseRollback, PhaseCancelled, nil},
		{PhaseSnapshot, PhaseRollback, PhaseCancelled, nil},
		{PhaseCatchUp, PhaseRollback, PhaseCancelled, nil},
		{PhaseCutover, PhaseRollback, PhaseCancelled, nil},
		{PhaseClaim, PhaseClaim, PhaseClaim, ErrTooLate},
		{PhaseCleanup, PhaseCleanup, PhaseCleanup, ErrTooLate},
	} {
		m := at(t, c.at)
		_, err := m.Step(EvCancel, context.Canceled)
		if !errors.Is(err, c.err) || m.Phase() != c.want {
			t.Errorf("cancel in %s: %v, now %s; want %v, %s", c.at, err, m.Phase(), c.err, c.want)
			continue
		}
		if m.Phase() == PhaseRollback {
			if _, err := m.Step(EvCancel, context.Canceled); !errors.Is(err, ErrRollingBack) || m.Phase() != PhaseRollback {
				t.Errorf("second cancel in the rollback: %v, now %s", err, m.Phase())
			}
			run(t, m, []step{{EvRolledBack, PhaseCancelled}})
		}
		if m.Phase() != c.end {
			t.Errorf("cancel in %s: ends %s, want %s", c.at, m.Phase(), c.end)
		}
		if c.end == PhaseCancelled && (m.Result() != ResultCancelled || !errors.Is(m.Cause(), context.Canceled)) {
			t.Errorf("cancel in %s: result %q, cause %v", c.at, m.Result(), m.Cause())
		}
	}
}

func TestCutoverAttemptsRunOut(t *testing.T) {
	m := NewMachine(2)
	run(t, m, []step{
		{EvPreflightPassed, PhaseImporting},
		{EvImportingSet, PhaseSnapshot},
		{EvSnapshotApplied, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvFenceMissed, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvFenceMissed, PhaseRollback},
		{EvRolledBack, PhaseFailed},
	})
	if m.Attempts() != 2 || m.Result() != ResultRolledBack {
		t.Fatalf("attempts %d, result %q", m.Attempts(), m.Result())
	}
}

func TestFailureAfterReleaseIsStuck(t *testing.T) {
	m := at(t, PhaseClaim)
	run(t, m, []step{{EvFailed, PhaseStuck}})
	if m.Result() != ResultStuck || m.Switched() {
		t.Fatalf("result %q, switched %v", m.Result(), m.Switched())
	}
	m = at(t, PhaseCleanup)
	run(t, m, []step{{EvFailed, PhaseStuck}})
	if !m.Switched() {
		t.Fatal("a failure in the cleanup forgot the switch")
	}
	// A release that went half-way: no claim, stuck with its error.
	m = at(t, PhaseCutover)
	halfWay := errors.New("release on source failed half-way")
	if _, err := m.Step(EvSourceReleased, halfWay); err != nil || m.Phase() != PhaseStuck || !m.Released() || !errors.Is(m.Cause(), halfWay) {
		t.Fatalf("half-way release: %v, now %s, released %v, cause %v", err, m.Phase(), m.Released(), m.Cause())
	}
}

func TestFailedRollbackIsStuck(t *testing.T) {
	m := NewMachine(1)
	run(t, m, []step{
		{EvPreflightPassed, PhaseImporting},
		{EvFailed, PhaseRollback},
		{EvFailed, PhaseStuck},
	})
	if !strings.Contains(m.Cause().Error(), "rollback failed") {
		t.Fatalf("cause %v", m.Cause())
	}
}

func TestCaughtUp(t *testing.T) {
	const max = 256 << 10
	for _, c := range []struct {
		lag, prev int64
		want      bool
	}{
		{lagFloor, -1, true},          // tiny: go
		{200 << 10, -1, false},        // first look, not tiny: wait for the trend
		{200 << 10, 240 << 10, false}, // still shrinking
		{200 << 10, 200 << 10, true},  // converged
		{210 << 10, 200 << 10, true},  // growing again: as good as it gets
		{300 << 10, 300 << 10, false}, // over the limit
	} {
		if got := caughtUp(c.lag, c.prev, max); got != c.want {
			t.Errorf("lag %d after %d: %v, want %v", c.lag, c.prev, got, c.want)
		}
	}
}

// Which event a phase's error is: a cancel while the source holds the
// slots, whatever the error; a refusal only for bad input before anything
// changed; a failure otherwise.
func TestFailure(t *testing.T) {
	bad := fmt.Errorf("preflight: %w", refuse("slot %d is not the source's", 7))
	boom := errors.New("connection reset")
	for _, tc := range []struct {
		phase  Phase
		err    error
		cancel bool
		want   Event
	}{
		{PhasePreflight, bad, false, EvRefused},
		{PhaseImporting, bad, false, EvRefused},
		{PhaseSnapshot, bad, false, EvFailed},
		{PhasePreflight, boom, false, EvFailed},
		{PhaseCatchUp, boom, false, EvFailed},
		{PhasePreflight, bad, true, EvCancel},
		{PhaseSnapshot, boom, true, EvCancel},
		{PhaseCutover, boom, true, EvCancel},
		{PhaseClaim, boom, true, EvFailed}, // too late to cancel: the claim's failure is stuck
		{PhaseCleanup, boom, false, EvFailed},
	} {
		m := at(t, tc.phase)
		if got := m.Failure(tc.err, tc.cancel); got != tc.want {
			t.Errorf("%s, error %v, cancel asked %v: %q, want %q", tc.phase, tc.err, tc.cancel, got, tc.want)
		}
	}
	for p, want := range map[Phase]bool{PhaseSnapshot: true, PhaseCutover: true, PhaseRollback: true, PhaseClaim: false, PhaseCleanup: false} {
		if p.Cancellable() != want {
			t.Errorf("%s cancellable: %v, want %v", p, !want, want)
		}
	}
}
