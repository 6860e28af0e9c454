package throttle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one server a move touches, probed on a client of its own (a
// shared pool would add the move's own queueing to the round trip).
type Server struct {
	Name   string
	Client *redis.Client
}

// Prober times a TIME to each server every interval, feeds the policy and
// holds the gate while it says so. TIME rather than PING: the server's
// clock leaves out the prober's own wait for the CPU (see serverClock).
type Prober struct {
	gate    *Gate
	servers []Server
	clocks  map[string]*serverClock // by server, touched by Run's goroutine only
	log     *slog.Logger

	mu     sync.Mutex
	policy *Policy
}

// Probing pace: a few dozen round trips a second on an otherwise idle
// connection, nothing a server notices.
const (
	interval      = 10 * time.Millisecond
	idleProbes    = 16
	idleInterval  = 5 * time.Millisecond
	longHoldAfter = 10 * time.Second
)

// NewProber returns a prober of servers that holds gate.
func NewProber(gate *Gate, b Budget, servers []Server, log *slog.Logger) *Prober {
	clocks := make(map[string]*serverClock, len(servers))
	for _, s := range servers {
		clocks[s.Name] = &serverClock{}
	}
	return &Prober{gate: gate, servers: servers, clocks: clocks, log: log, policy: NewPolicy(b)}
}

// Budget is the budget in force.
func (p *Prober) Budget() Budget {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.policy.Budget()
}

// SetBudget changes the budget; the next probe judges by it.
func (p *Prober) SetBudget(b Budget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.policy.SetBudget(b)
	p.log.Info("budget changed", "budget", p.policy.Budget())
}

// Run takes the servers' idle round trips, holding the gate meanwhile
// unless the budget is off (they are the baseline should it be turned
// on), then probes while the budget is on, until ctx ends. It returns ctx's
// error; a failed probe counts as one as slow as its wait, never as an
// error: the move's own calls find a server that is gone.
func (p *Prober) Run(ctx context.Context) error {
	if !p.Budget().Off {
		p.gate.Set(Measuring, true, "the servers' round trips before the move")
	}
	err := p.baseline(ctx)
	p.gate.Set(Measuring, false, "")
	if err != nil {
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var heldSince time.Time
	for {
		select {
		case <-ctx.Done():
			p.gate.Set(OverBudget, false, "")
			return ctx.Err()
		case <-tick.C:
		}
		if p.Budget().Off {
			// Nothing to judge: no probe costs the servers anything.
			p.gate.Set(OverBudget, false, "")
			heldSince = time.Time{}
			continue
		}
		for _, s := range p.servers {
			took := p.probe(ctx, s)
			p.mu.Lock()
			p.policy.Observe(s.Name, took, time.Now())
			p.mu.Unlock()
		}
		p.mu.Lock()
		hold, why := p.policy.Verdict(time.Now())
		p.mu.Unlock()
		p.gate.Set(OverBudget, hold, why)
		switch {
		case !hold:
			heldSince = time.Time{}
		case heldSince.IsZero():
			heldSince = time.Now()
		case time.Since(heldSince) > longHoldAfter:
			p.log.Warn("the move holds: the servers are over its budget (slotmover budget changes it)", "for", time.Since(heldSince).Round(time.Second), "why", why)
			heldSince = time.Now()
		}
	}
}

func (p *Prober) baseline(ctx context.Context) error {
	idle := make(map[string][]time.Duration, len(p.servers))
	for range idleProbes {
		for _, s := range p.servers {
			idle[s.Name] = append(idle[s.Name], p.probe(ctx, s))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(idleInterval):
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.servers {
		p.policy.Baseline(s.Name, idle[s.Name])
	}
	return nil
}

// probeTimeout bounds a probe: a server this slow is over any budget.
const probeTimeout = time.Second

// probe is how long s took to answer a TIME; a failure is as slow as it
// took.
func (p *Prober) probe(ctx context.Context, s Server) time.Duration {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	sent := time.Now()
	served, err := s.Client.Time(pctx).Result()
	received := time.Now()
	if err != nil {
		return received.Sub(sent)
	}
	return p.clocks[s.Name].latency(sent, served, received)
}
