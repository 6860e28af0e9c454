package throttle

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Hold is a reason for a gate to be shut.
type Hold int

const (
	// Measuring holds the move while the prober takes the servers' idle
	// round trips: the move's own work would spoil them.
	Measuring Hold = iota
	// OverBudget holds it while the servers are slower than its budget.
	OverBudget
	// Paused holds it on an operator's request.
	Paused
	holds
)

var holdNames = [holds]string{"measuring", "over budget", "paused"}

func (h Hold) String() string { return holdNames[h] }

// Gate lets a move's work through, or holds it while any Hold is on.
// Wait costs one atomic load while the gate is open.
type Gate struct {
	shut atomic.Bool

	mu     sync.Mutex
	on     [holds]time.Time // when each hold began; zero while off
	total  [holds]time.Duration
	why    [holds]string
	bypass bool          // a cutover is under way: nothing may hold its drain
	opened chan struct{} // closed when the gate opens; nil while open
	now    func() time.Time
}

// NewGate returns an open gate.
func NewGate() *Gate { return &Gate{now: time.Now} }

// Wait returns once the gate is open, or ctx's error if ctx ends first.
func (g *Gate) Wait(ctx context.Context) error {
	if !g.shut.Load() {
		return nil
	}
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	if opened == nil {
		return nil
	}
	select {
	case <-opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Set turns hold h on (with why) or off.
func (g *Gate) Set(h Hold, on bool, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.why[h] = why
	switch was := !g.on[h].IsZero(); {
	case on && !was:
		g.on[h] = g.now()
	case !on && was:
		g.total[h] += g.now().Sub(g.on[h])
		g.on[h] = time.Time{}
	}
	g.update()
}

// Bypass lets everything through while on, whatever holds: a cutover's
// write pause must not last for a hold.
func (g *Gate) Bypass(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.bypass = on
	g.update()
}

// update opens or shuts the gate by its holds; g.mu is held.
func (g *Gate) update() {
	shut := false
	for _, t := range g.on {
		shut = shut || !t.IsZero()
	}
	shut = shut && !g.bypass
	switch {
	case shut && g.opened == nil:
		g.opened = make(chan struct{})
	case !shut && g.opened != nil:
		close(g.opened)
		g.opened = nil
	}
	g.shut.Store(shut)
}

// State is what a gate reports.
type State struct {
	Holding   []string      // the holds on now, with their reasons
	Throttled time.Duration // held over budget, in all
	Paused    time.Duration // held by an operator, in all
	IsPaused  bool
}

// State reports the holds on now and the time held so far.
func (g *Gate) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	held := func(h Hold) time.Duration {
		d := g.total[h]
		if !g.on[h].IsZero() {
			d += now.Sub(g.on[h])
		}
		return d
	}
	s := State{Throttled: held(OverBudget), Paused: held(Paused), IsPaused: !g.on[Paused].IsZero()}
	for h, t := range g.on {
		if !t.IsZero() {
			r := Hold(h).String()
			if g.why[h] != "" {
				r += ": " + g.why[h]
			}
			s.Holding = append(s.Holding, r)
		}
	}
	return s
}
