package mover

import (
	"errors"
	"testing"
)

type step struct {
	ev   Event
	want Phase // "" means the event must be refused
}

func run(t *testing.T, m *Machine, steps []step) {
	t.Helper()
	for i, s := range steps {
		before := m.Phase
		tr, err := m.Step(s.ev, errors.New("boom"))
		if s.want == "" {
			if err == nil {
				t.Fatalf("step %d: %q in %s accepted (to %s)", i, s.ev, before, tr.To)
			}
			if m.Phase != before {
				t.Fatalf("step %d: refused event changed the phase", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %q in %s: %v", i, s.ev, before, err)
		}
		if m.Phase != s.want || tr.From != before || tr.To != s.want {
			t.Fatalf("step %d: %q in %s went to %s, want %s", i, s.ev, before, m.Phase, s.want)
		}
	}
}

func TestHappyPath(t *testing.T) {
	run(t, NewMachine(3), []step{
		{EvPreflightPassed, PhaseImporting},
		{EvImportingSet, PhaseSnapshot},
		{EvSnapshotApplied, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvFenceMissed, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvSwitched, ""}, // never before the source released
		{EvSourceReleased, PhaseCutover},
		{EvCancel, ""}, // too late
		{EvSwitched, PhaseCleanup},
		{EvCleanupDone, PhaseDone},
		{EvFailed, ""}, // over
	})
}

func TestOutOfOrderEventsAreRefused(t *testing.T) {
	run(t, NewMachine(3), []step{
		{EvSnapshotApplied, ""},
		{EvLagLow, ""},
		{EvRolledBack, ""},
		{EvPreflightPassed, PhaseImporting},
		{EvPreflightPassed, ""},
	})
}

func TestFailureBeforeAnyChangeNeedsNoRollback(t *testing.T) {
	m := NewMachine(3)
	run(t, m, []step{{EvFailed, PhaseFailed}})
	if m.Cause == nil {
		t.Fatal("no cause recorded")
	}
}

// Importing marks that the target refuses as a whole leave nothing to undo;
// anywhere else the event makes no sense.
func TestRefusedMarksNeedNoRollback(t *testing.T) {
	run(t, NewMachine(3), []step{
		{EvRefused, ""},
		{EvPreflightPassed, PhaseImporting},
		{EvRefused, PhaseFailed},
	})
	run(t, NewMachine(3), []step{
		{EvPreflightPassed, PhaseImporting},
		{EvImportingSet, PhaseSnapshot},
		{EvRefused, ""},
	})
}

func TestFailuresRollBack(t *testing.T) {
	for _, at := range []Phase{PhaseImporting, PhaseSnapshot, PhaseCatchUp, PhaseCutover} {
		m := NewMachine(3)
		for m.Phase != at {
			ev := map[Phase]Event{PhasePreflight: EvPreflightPassed, PhaseImporting: EvImportingSet, PhaseSnapshot: EvSnapshotApplied, PhaseCatchUp: EvLagLow}[m.Phase]
			if _, err := m.Step(ev, nil); err != nil {
				t.Fatal(err)
			}
		}
		run(t, m, []step{{EvFailed, PhaseRollback}, {EvLagLow, ""}, {EvRolledBack, PhaseFailed}})
	}
}

func TestCancelRollsBackToCancelled(t *testing.T) {
	run(t, NewMachine(3), []step{
		{EvPreflightPassed, PhaseImporting},
		{EvImportingSet, PhaseSnapshot},
		{EvCancel, PhaseRollback},
		{EvRolledBack, PhaseCancelled},
	})
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
	if m.Attempts != 2 {
		t.Fatalf("attempts %d", m.Attempts)
	}
}

func TestFailureAfterReleaseIsStuck(t *testing.T) {
	run(t, NewMachine(1), []step{
		{EvPreflightPassed, PhaseImporting},
		{EvImportingSet, PhaseSnapshot},
		{EvSnapshotApplied, PhaseCatchUp},
		{EvLagLow, PhaseCutover},
		{EvSourceReleased, PhaseCutover},
		{EvFenceMissed, ""},
		{EvFailed, PhaseStuck},
	})
}

func TestFailedRollbackIsStuck(t *testing.T) {
	run(t, NewMachine(1), []step{
		{EvPreflightPassed, PhaseImporting},
		{EvFailed, PhaseRollback},
		{EvFailed, PhaseStuck},
	})
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
