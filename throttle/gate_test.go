package throttle

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	now := time.Unix(0, 0)
	g := NewGate()
	g.now = func() time.Time { return now }
	ctx := context.Background()
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("a new gate is open: %v", err)
	}
	g.Set(OverBudget, true, "slow")
	g.Set(Paused, true, "")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := g.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a shut gate: %v, want the context's end", err)
	}
	g.Bypass(true)
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("Wait on a bypassed gate: %v", err)
	}
	g.Bypass(false)
	now = now.Add(3 * time.Second)
	g.Set(OverBudget, false, "")
	if s := g.State(); len(s.Holding) != 1 || s.Holding[0] != "paused" || !s.IsPaused || s.Throttled != 3*time.Second || s.Paused != 3*time.Second {
		t.Fatalf("state %+v, want paused alone, 3 s of each", s)
	}
	waited := make(chan error, 1)
	go func() { waited <- g.Wait(ctx) }()
	select {
	case err := <-waited:
		t.Fatalf("Wait passed a paused gate: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	now = now.Add(time.Second)
	g.Set(Paused, false, "")
	if err := <-waited; err != nil {
		t.Fatalf("Wait after the last hold went: %v", err)
	}
	if s := g.State(); len(s.Holding) != 0 || s.IsPaused || s.Throttled != 3*time.Second || s.Paused != 4*time.Second {
		t.Fatalf("state %+v, want open, 3 s throttled, 4 s paused", s)
	}
}
